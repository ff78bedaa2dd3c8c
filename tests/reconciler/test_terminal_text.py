"""A file name, a message or an event a committer wrote reaches people through the
command line: a control character in it (an escape sequence, a bidirectional control)
is shown as its escape, never passed to the terminal to act on."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.problems import Problem
from nodus_gitops.output import describe, resources_table
from nodus_gitops.state.records import EventRecord, InventoryRecord

ESC = "a\x1b[2Jb\u202ec"
SHOWN = "a\\x1b[2Jb\\u202ec"


def test_a_problem_line_shows_controls_as_escapes_and_its_dict_keeps_them() -> None:
    p = Problem(f"jobs/{ESC}.yaml", 3, "Job", "x", "spec.timeout", f"bad {ESC}")
    assert str(p) == f"jobs/{SHOWN}.yaml:3: Job/x: spec.timeout: bad {SHOWN}"
    assert "\x1b" not in str(p) and p.as_dict()["file"] == f"jobs/{ESC}.yaml"


def test_get_wide_and_describe_show_controls_as_escapes() -> None:
    r = InventoryRecord(ResourceKey("Job", "p", "x"), "b", {"kind": "Job"}, "h",
                        phase="Failed", reason="CreateFailed", message=f"m {ESC}",
                        source_file=f"jobs/{ESC}.yaml", source_commit="c" * 40,
                        created_at=datetime(2026, 1, 1, tzinfo=UTC))
    event = EventRecord(id=1, key=r.key, type="Warning", reason="Failed", message=f"e {ESC}",
                        at=datetime(2026, 1, 1, tzinfo=UTC))
    for text in (resources_table([r], wide=True), describe(r, [event])):
        assert "\x1b" not in text and "\u202e" not in text, text
        assert SHOWN in text


def test_validate_on_a_file_named_with_an_escape_sequence(tmp_path: Path) -> None:
    (tmp_path / f"{ESC}.yaml").write_text("kind: Job\n")
    done = subprocess.run([sys.executable, "-m", "nodus_gitops.cli", "validate",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "\x1b" not in done.stdout + done.stderr and SHOWN in done.stdout
