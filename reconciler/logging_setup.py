"""Structured logs: one JSON object a line when stderr is not a terminal, readable text
when it is. Secrets never reach a log: messages carry redacted URLs only."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(),
                 "level": record.levelname.lower(), "logger": record.name,
                 "message": record.getMessage()}
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        tail = " ".join(f"{k}={v}" for k, v in extra.items())
        return f"{record.levelname.lower():<7} {record.getMessage()}" + (f"  {tail}" if tail
                                                                         else "")


def setup_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if sys.stderr.isatty() else JsonFormatter())
    root = logging.getLogger("nodus_gitops")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # The HTTP server's loggers (uvicorn's own, and asyncio's under its event loop) write
    # through the same handler: left alone, their warnings would reach Python's last-resort
    # handler, as plain text. Their start and stop lines are left out (the service logs
    # its own).
    for name in ("uvicorn", "asyncio"):
        server = logging.getLogger(name)
        server.handlers[:] = [handler]
        server.setLevel(logging.WARNING)
        server.propagate = False
