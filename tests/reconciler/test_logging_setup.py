"""What `serve` writes to stderr, record by record: one JSON object a line (the default off
a terminal, or `--log-format json`), or a short line for people (`--log-format text`, the
default on a terminal), for the reconciler's own records and for every library's alike."""

from __future__ import annotations

import io
import json
import logging
import re
import threading
import warnings
from collections.abc import Iterator

import pytest
from nodus_gitops.cli import build_parser
from nodus_gitops.logging_setup import JsonFormatter, TextFormatter, setup_logging

SKIPPED = ('Execution of job "Service.reconcile (trigger: first at 2024-01-01T00:00:00, '
           'then interval[0:00:01], next run at: 2024-01-01 00:00:02 UTC)" skipped: '
           'maximum number of running instances reached')
CLOCK = r"\d\d:\d\d:\d\d"


def _record(logger: str, level: int, message: str, *args: object,
            **extra: object) -> logging.LogRecord:
    return logging.getLogger(logger).makeRecord(logger, level, "x.py", 1, message, args,
                                                None, extra=extra or None)


def test_an_apscheduler_warning_is_one_json_object() -> None:
    line = JsonFormatter().format(_record("apscheduler.executors.default", logging.WARNING,
                                          SKIPPED))
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["message"]) == (
        "warning", "apscheduler.executors.default", SKIPPED)
    assert set(entry) == {"time", "level", "logger", "message"}


def test_an_apscheduler_warning_reads_as_a_line_for_people() -> None:
    line = TextFormatter().format(_record("apscheduler.executors.default", logging.WARNING,
                                          SKIPPED))
    assert re.fullmatch(rf"{CLOCK}  warning  apscheduler: {re.escape(SKIPPED)}", line), line


def test_an_alembic_record_is_one_json_object_and_a_line_for_people() -> None:
    record = _record("alembic.runtime.migration", logging.INFO, "Running upgrade %s -> %s, %s",
                     "", "0001", "baseline")
    entry = json.loads(JsonFormatter().format(record))
    assert (entry["level"], entry["logger"], entry["message"]) == (
        "info", "alembic.runtime.migration", "Running upgrade  -> 0001, baseline")
    line = TextFormatter().format(record)
    assert re.fullmatch(rf"{CLOCK}  alembic: Running upgrade  -> 0001, baseline", line), line


def _outcome(result: str, counts: dict[str, int], summary: str) -> logging.LogRecord:
    return _record("nodus_gitops.sync", logging.INFO, "sync finished", binding="examples",
                   commit="abc1234def5678abc1234def5678abc1234def56", result=result,
                   counts=counts, summary=summary)


@pytest.mark.parametrize("result, counts, summary, shown", [
    ("applied", {"created": 4}, "4 created", "applied  4 created"),
    ("noop", {"unchanged": 3}, "3 unchanged", "noop  3 unchanged"),
    ("invalid", {}, "2 problems; nothing applied", "invalid  2 problems; nothing applied"),
    ("error", {}, "cannot reach the backend:\nconnection refused",
     "error  cannot reach the backend: connection refused"),
])
def test_a_sync_outcome_is_time_binding_commit_result_and_what_it_did(
        result: str, counts: dict[str, int], summary: str, shown: str) -> None:
    line = TextFormatter().format(_outcome(result, counts, summary))
    assert re.fullmatch(rf"{CLOCK}  examples  abc1234  {re.escape(shown)}", line), line


def test_a_sync_outcome_in_json_keeps_its_fields() -> None:
    entry = json.loads(JsonFormatter().format(_outcome("applied", {"created": 4},
                                                       "4 created")))
    assert entry["message"] == "sync finished"
    assert (entry["binding"], entry["result"], entry["counts"], entry["summary"]) == (
        "examples", "applied", {"created": 4}, "4 created")
    assert entry["commit"] == "abc1234def5678abc1234def5678abc1234def56"


def test_other_records_of_the_reconciler_read_as_message_and_fields() -> None:
    line = TextFormatter().format(_record("nodus_gitops.service", logging.INFO, "serving",
                                          listen="127.0.0.1:8080"))
    assert re.fullmatch(rf"{CLOCK}  serving  listen=127.0.0.1:8080", line), line
    line = TextFormatter().format(_record("nodus_gitops.sync", logging.WARNING,
                                          "poll failed", binding="examples", failures=2))
    assert re.fullmatch(rf"{CLOCK}  warning  poll failed  binding=examples failures=2",
                        line), line


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """setup_logging changes the process's logging tree and thread hook: put them back
    after the test."""
    names = ["", "nodus_gitops", "uvicorn", "asyncio", "apscheduler", "alembic", "py.warnings"]
    hook = threading.excepthook
    saved = {n: (logging.getLogger(n).handlers[:], logging.getLogger(n).level,
                 logging.getLogger(n).propagate) for n in names}
    try:
        yield
    finally:
        logging.captureWarnings(False)
        threading.excepthook = hook
        for n, (handlers, level, propagate) in saved.items():
            logger = logging.getLogger(n)
            logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate


def _log_from_every_library() -> None:
    logging.getLogger("apscheduler.executors.default").warning(SKIPPED)
    logging.getLogger("apscheduler.scheduler").info("Added job")  # noise: left out
    logging.getLogger("alembic.runtime.migration").warning("a revision's warning")
    logging.getLogger("alembic.runtime.migration").info("Context impl SQLiteImpl.")  # noise
    logging.getLogger("sqlalchemy.pool").warning("a pool's warning")
    logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")
    logging.getLogger("asyncio").error("Task exception was never retrieved")
    logging.getLogger("nodus_gitops.service").info("serving", extra={"listen": "x:1"})
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library's deprecation", DeprecationWarning, stacklevel=1)


def test_json_mode_puts_every_library_through_one_formatter(restored_logging: None) -> None:
    out = io.StringIO()
    setup_logging(log_format="json", stream=out)
    _log_from_every_library()
    entries = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(e["logger"], e["level"]) for e in entries] == [
        ("apscheduler.executors.default", "warning"), ("alembic.runtime.migration", "warning"),
        ("sqlalchemy.pool", "warning"), ("uvicorn.error", "warning"), ("asyncio", "error"),
        ("nodus_gitops.service", "info"), ("py.warnings", "warning")]
    assert entries[0]["message"] == SKIPPED
    assert "a library's deprecation" in entries[-1]["message"]


def test_text_mode_puts_every_library_through_one_formatter(restored_logging: None) -> None:
    out = io.StringIO()
    setup_logging(log_format="text", stream=out)
    _log_from_every_library()
    lines = out.getvalue().splitlines()
    assert lines[:6] == [lines[n][:8] + "  " + shown for n, shown in enumerate([
        f"warning  apscheduler: {SKIPPED}", "warning  alembic: a revision's warning",
        "warning  sqlalchemy: a pool's warning",
        "warning  uvicorn: Invalid HTTP request received.",
        "error  asyncio: Task exception was never retrieved", "serving  listen=x:1"])]
    assert all(re.match(CLOCK, line) for line in lines[:6])
    assert lines[6].endswith("DeprecationWarning: a library's deprecation")


def test_a_thread_that_crashes_is_logged_not_printed(restored_logging: None) -> None:
    out = io.StringIO()
    setup_logging(log_format="json", stream=out)

    def crash() -> None:
        raise RuntimeError("the loop broke")

    thread = threading.Thread(target=crash, name="http")
    thread.start()
    thread.join()
    [entry] = [json.loads(line) for line in out.getvalue().splitlines()]
    assert (entry["level"], entry["message"], entry["thread_name"]) == ("error", "thread crashed",
                                                                   "http")
    assert "RuntimeError: the loop broke" in entry["exception"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_default_is_text_on_a_terminal_and_json_elsewhere(
        restored_logging: None) -> None:
    terminal, pipe = _Terminal(), io.StringIO()
    setup_logging(stream=terminal)
    logging.getLogger("nodus_gitops.service").info("serving")
    setup_logging(stream=pipe)
    logging.getLogger("nodus_gitops.service").info("serving")
    assert re.fullmatch(rf"{CLOCK}  serving\n", terminal.getvalue())
    assert json.loads(pipe.getvalue())["message"] == "serving"


@pytest.mark.parametrize("value", ["auto", "text", "json"])
def test_serve_takes_log_format(value: str) -> None:
    args = build_parser().parse_args(["serve", "--log-format", value])
    assert args.log_format == value
    assert build_parser().parse_args(["serve"]).log_format == "auto"


def test_serve_refuses_another_log_format(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["serve", "--log-format", "xml"])
    assert e.value.code == 2 and "--log-format" in capsys.readouterr().err
