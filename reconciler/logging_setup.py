"""Logs on stderr through one handler on the root logger, so that every library's records
(APScheduler, uvicorn, asyncio, Alembic, SQLAlchemy, warnings) take the reconciler's
form: one JSON object a line when stderr is not a terminal (`--log-format json`), a short
line for people when it is (`--log-format text`). A record that carries a `result` is a
sync's outcome: people see its time, binding, short commit, result and what it did.
Secrets never reach a log: messages carry redacted URLs only."""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime
from typing import TextIO

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
LOG_FORMATS = ("auto", "text", "json")  # auto: text on a terminal, JSON elsewhere
# The fields a sync's outcome record carries (sync.py's "sync finished").
_OUTCOME_SHOWN = ("binding", "commit", "result", "counts", "summary")


def _extra(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(),
                 "level": record.levelname.lower(), "logger": record.name,
                 "message": record.getMessage()}
        entry.update(_extra(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """`09:12:03  examples  abc1234  applied  4 created` for a sync's outcome; else the
    local time, the level unless info, a library's name, the message and its fields."""

    def format(self, record: logging.LogRecord) -> str:
        clock = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        extra = _extra(record)
        if "result" in extra and "binding" in extra:
            line = "  ".join(str(part) for part in (
                clock, extra["binding"], str(extra.get("commit") or "-")[:7], extra["result"],
                _one_line(str(extra.get("summary") or ""))) if part)
            rest = {k: v for k, v in extra.items() if k not in _OUTCOME_SHOWN}
        else:
            message = record.getMessage()
            if record.name == "py.warnings":  # the warning, not the source line it repeats
                message = message.strip().splitlines()[0] if message.strip() else message
            top = record.name.partition(".")[0]
            parts = [clock, record.levelname.lower() if record.levelno != logging.INFO
                     else "", message if top == "nodus_gitops" else f"{top}: {message}"]
            line = "  ".join(p for p in parts if p)
            rest = extra
        if rest:
            line += "  " + " ".join(f"{k}={v}" for k, v in rest.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _one_line(text: str) -> str:
    return " ".join(text.split())


def setup_logging(level: int = logging.INFO, *, log_format: str = "auto",
                  stream: TextIO | None = None) -> None:
    """Send every logger's records to `stream` (stderr) in `log_format`: the reconciler's
    from `level` up, the libraries' from WARNING up (their start, stop and per-job lines
    are left out: the service logs its own)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")
    stream = stream if stream is not None else sys.stderr
    text = log_format == "text" or (log_format == "auto" and stream.isatty())
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter() if text else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    # Loggers given handlers of their own (by an earlier call, or a library) write
    # through the root's alone, so that nothing is written twice or in another form.
    for name in ("nodus_gitops", "uvicorn", "asyncio", "apscheduler"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    logging.getLogger("nodus_gitops").setLevel(level)
    logging.captureWarnings(True)  # warnings.warn goes to `py.warnings`, formatted alike
    threading.excepthook = _log_thread_crash


def _log_thread_crash(args: threading.ExceptHookArgs) -> None:
    """A thread that dies of an exception is logged like any error, not printed."""
    if issubclass(args.exc_type, SystemExit):
        return
    logging.getLogger("nodus_gitops").error(
        "thread crashed", exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        extra={"thread_name": args.thread.name if args.thread else None})
