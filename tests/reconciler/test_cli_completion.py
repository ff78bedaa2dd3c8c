"""Shell completion: `nodus-gitops completion bash|zsh|fish` prints a script that asks
`nodus-gitops __complete` for commands, flags, their values, kinds and the resource
names of the state. Bash runs the script for real (its `complete -p` and the function
called as bash calls it, with COMP_WORDS and COMP_CWORD); zsh and fish where installed."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nodus_gitops.cli import build_parser
from nodus_gitops.completion import FILES, candidates
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store

BIN = Path(sys.executable).parent  # where the installed nodus-gitops is


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ./.nodus-gitops records Jobs train and tune, a Pipeline te whose
    stage te-prep was created, and a Sweep."""
    work = tmp_path_factory.mktemp("completion")
    store = Store.open(None, work / ".nodus-gitops")
    store.upsert_binding("b", "https://github.com/acme/ml.git", "main", "", "p")
    for kind, name, status in (
            ("Job", "train", {}), ("Job", "tune", {}), ("Sweep", "sw", {}),
            ("Pipeline", "te", {"stages": [{"name": "prep", "phase": "Running",
                                            "job": "te-prep"}]})):
        store.upsert_resource(InventoryRecord(ResourceKey(kind, "p", name), "b",
                                              {"kind": kind, "spec": {}}, "h", status=status))
    store.close()
    return work


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_GITOPS_")}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}


def complete(work: Path, *words: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "nodus_gitops.cli", "__complete", *words],
                          cwd=work, env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.splitlines()


def test_commands_flags_and_choices_come_from_the_parser(work: Path) -> None:
    parser_commands = sorted(build_parser()._subparsers._group_actions[0].choices)
    assert sorted(complete(work, "")) == parser_commands
    assert complete(work, "de") == ["describe"]
    flags = complete(work, "get", "--")
    assert {"--output", "--watch", "--no-headers", "--sort-by", "--selector", "--state-dir",
            "--config"} <= set(flags)
    assert complete(work, "get", "-o", "") == ["table", "wide", "json", "yaml", "name"]
    assert complete(work, "get", "-o", "y") == ["yaml"]
    assert complete(work, "get", "--state-dir", "") == [FILES]
    assert complete(work, "validate", "") == [FILES]
    assert complete(work, "completion", "") == ["bash", "zsh", "fish"]


def test_kinds_then_names_from_the_state(work: Path) -> None:
    assert complete(work, "get", "") == ["job/", "pipeline/", "sweep/", "jobs", "pipelines",
                                         "sweeps"]
    assert complete(work, "describe", "p") == ["pipeline/"]
    assert complete(work, "logs", "") == ["job/"]
    # a Pipeline's stage Job is a Job by name, as `get jobs` lists it
    assert complete(work, "get", "job/") == ["job/te-prep", "job/train", "job/tune"]
    assert complete(work, "logs", "job/t") == ["job/te-prep", "job/train", "job/tune"]
    assert complete(work, "describe", "job/tr") == ["job/train"]
    assert complete(work, "get", "pipeline/") == ["pipeline/te"]
    assert complete(work, "get", "job/a", "") == []  # one target only


def test_names_follow_the_state_the_words_point_at(work: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    store = Store.open(None, other)
    store.upsert_binding("b", "https://github.com/acme/ml.git", "main", "", "p")
    store.upsert_resource(InventoryRecord(ResourceKey("Job", "p", "elsewhere"), "b",
                                          {"kind": "Job", "spec": {}}, "h"))
    store.close()
    assert complete(work, "get", "--state-dir", str(other), "job/") == ["job/elsewhere"]
    # no state there: no names, nothing made, no error
    assert complete(work, "get", "--state-dir", str(tmp_path / "none"), "job/") == []
    assert not (tmp_path / "none").exists()


def test_the_same_candidates_in_process() -> None:
    asked: list[tuple[str | None, str]] = []

    def names(args, kind: str) -> list[str]:
        asked.append((args.state_dir, kind))
        return ["a", "b"]

    assert candidates(build_parser(), ["get", "--sort"], names) == ["--sort-by"]
    assert candidates(build_parser(), ["logs", "--state-dir", "S", "job/b"], names) == ["job/b"]
    assert asked == [("S", "job")]


def _bash(work: Path, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "--norc", "--noprofile", "-c", script], cwd=work,
                          env=_env(), capture_output=True, text=True, timeout=120)


def _bash_completes(work: Path, *words: str) -> list[str]:
    """What bash offers with `words` on the line, the last being the one completed."""
    line = " ".join(shlex.quote(w) for w in ("nodus-gitops", *words))
    done = _bash(work, 'source <(nodus-gitops completion bash)\n'
                 f"COMP_WORDS=({line}); COMP_CWORD={len(words)}\n"
                 "_nodus_gitops; printf '%s\\n' \"${COMPREPLY[@]}\"")
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_bash_loads_the_script_and_completes(work: Path) -> None:
    done = _bash(work, "source <(nodus-gitops completion bash)\ncomplete -p nodus-gitops")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "complete -F _nodus_gitops nodus-gitops"
    assert _bash_completes(work, "ge") == ["get"]
    assert _bash_completes(work, "get", "--no") == ["--no-headers"]
    assert _bash_completes(work, "get", "job/t") == ["job/te-prep", "job/train", "job/tune"]
    assert _bash_completes(work, "get", "-o", "w") == ["wide"]
    (work / "notes.txt").write_text("")
    assert _bash_completes(work, "validate", "not") == ["notes.txt"]  # file names


def test_each_script_is_made_from_the_same_parser() -> None:
    for shell in ("bash", "zsh", "fish"):
        done = subprocess.run([sys.executable, "-m", "nodus_gitops.cli", "completion", shell],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "nodus-gitops" in done.stdout and "__complete" in done.stdout
    done = subprocess.run([sys.executable, "-m", "nodus_gitops.cli", "completion", "tcsh"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "bash" in done.stderr


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_loads_the_script_and_completes(work: Path) -> None:
    # compadd works only inside a completion widget: record what the function adds
    script = ("autoload -Uz compinit && compinit -u -D\n"
              "source <(nodus-gitops completion zsh)\n"
              "compadd() { local a; for a in \"$@\"; do [[ $a == -* ]] || print -r -- $a; done }\n"
              "_files() { print -r -- FILES }\n"
              "words=(nodus-gitops get job/t); CURRENT=3; _nodus_gitops\n"
              "print -r -- ---\n"
              "words=(nodus-gitops validate x); CURRENT=3; _nodus_gitops\n")
    done = subprocess.run(["zsh", "-f", "-c", script], cwd=work, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names, files = done.stdout.split("---\n")
    assert names.split() == ["job/te-prep", "job/train", "job/tune"]
    assert files.split() == ["FILES"]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_loads_the_script_and_completes(work: Path) -> None:
    script = ("nodus-gitops completion fish | source\n"
              "complete -C 'nodus-gitops get job/t'\n")
    done = subprocess.run(["fish", "--no-config", "-c", script], cwd=work, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [line.split("\t")[0] for line in done.stdout.splitlines()] == [
        "job/te-prep", "job/train", "job/tune"]
