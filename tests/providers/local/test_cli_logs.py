"""`nodus-gitops logs` and `cp` read a local Job through its backend's capabilities
(`HasLogs`, `HasOutputs`), with the backend built from the config's settings."""

from __future__ import annotations

from pathlib import Path

from nodus_gitops.cli import main
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.base import Workload

from tests.providers.local.conftest import manifest

CODE = """
import os
print("line one", flush=True)
print("index", os.environ["NODUS_INDEX"])
open(os.environ["NODUS_OUTPUTS_DIR"] + "/r.txt", "w").write("out")
"""


def test_logs_and_cp_of_a_local_job_through_the_cli(local, tmp_path, capsys) -> None:
    key = ResourceKey("Job", "default", "cli-logs")  # the CLI's project without inventory
    local.keys.append(key)
    local.provider.create(Workload(key, manifest("cli-logs", CODE, outputs=[
        {"name": "r", "path": "/nodus/outputs/r.txt"}]), "h"), "cli-logs-1")
    assert local.wait(key).phase == "Succeeded"
    config = tmp_path / "config.yaml"
    config.write_text(f"providers:\n  local:\n    type: local\n    root: {local.root}\n"
                      "    sandbox: none\n")
    args = ["--config", str(config), "--state-dir", str(tmp_path / "state")]
    assert main(["logs", "job/cli-logs", *args]) == 0
    assert capsys.readouterr().out == "line one\nindex 0\n"
    assert main(["logs", "job/cli-logs", "-f", *args]) == 0  # finished: ends at once
    assert capsys.readouterr().out == "line one\nindex 0\n"
    assert main(["cp", "job/cli-logs:outputs/r", str(tmp_path / "copy.txt"), *args]) == 0
    assert (tmp_path / "copy.txt").read_text() == "out"
    assert main(["logs", "job/never-ran", *args]) == 1
    assert "Job/never-ran has not run on this machine" in capsys.readouterr().err


def test_logs_of_a_job_that_never_ran_is_one_clear_message(tmp_path: Path, capsys) -> None:
    code = main(["logs", "job/nope", "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 1 and "nope has not run on this machine" in err and "Traceback" not in err


# What a hostile Job prints to take over the reader's terminal: a window title, the
# clipboard (OSC 52), a cleared screen, a line rewritten by a carriage return, a CSI
# in its one-byte C1 form.
ESCAPES = """
import sys
sys.stdout.write("\\x1b]0;pwned\\x07\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2Jsafe\\rfake\\x9b31m\\tok\\n")
sys.stdout.write("rm -rf /tmp/x \\u202e# harmless\\u2066\\n")  # shown reordered
sys.stdout.flush()
sys.stdout.buffer.write(b"not utf-8: \\xff\\n")  # read as U+FFFD, on a terminal or not
"""


def _logs_through(stdout_is_tty: bool, args: list[str]) -> bytes:
    """`nodus-gitops logs` as a user runs it: its stdout a terminal or a pipe."""
    import os
    import pty
    import subprocess
    import sys

    cmd = [sys.executable, "-c", "import sys; from nodus_gitops.cli import main; "
           "sys.exit(main(sys.argv[1:]))", "logs", *args]
    if not stdout_is_tty:
        return subprocess.run(cmd, capture_output=True, check=True, timeout=60).stdout
    leader, follower = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=follower, stderr=subprocess.DEVNULL)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    return out.replace(b"\r\n", b"\n")  # the terminal's own line ends


def test_logs_never_pass_a_jobs_control_characters_to_a_terminal(local, tmp_path) -> None:
    key = ResourceKey("Job", "default", "escapes")
    local.keys.append(key)
    local.provider.create(Workload(key, manifest("escapes", ESCAPES), "h"), "escapes-1")
    assert local.wait(key).phase == "Succeeded"
    config = tmp_path / "config.yaml"
    config.write_text(f"providers:\n  local:\n    type: local\n    root: {local.root}\n"
                      "    sandbox: none\n")
    args = ["job/escapes", "--config", str(config), "--state-dir", str(tmp_path / "state")]
    shown = _logs_through(True, args)
    assert not any(b < 0x20 and b not in b"\t\n" for b in shown), shown
    assert "\x9b".encode() not in shown and b"\x7f" not in shown
    assert shown == (b"\\x1b]0;pwned\\x07\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2Jsafe\\x0dfake"
                     b"\\x9b31m\tok\nrm -rf /tmp/x \\u202e# harmless\\u2066\n"
                     + "not utf-8: \ufffd\n".encode())
    # into a file or a pipe, the log stays as the program wrote it (UTF-8 or U+FFFD)
    assert _logs_through(False, args) == ("\x1b]0;pwned\x07\x1b]52;c;cm0gLXJmIH4=\x07"
                                          "\x1b[2Jsafe\rfake\x9b31m\tok\n"
                                          "rm -rf /tmp/x \u202e# harmless\u2066\n"
                                          "not utf-8: \ufffd\n").encode()
