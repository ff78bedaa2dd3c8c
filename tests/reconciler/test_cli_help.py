"""Every command's --help says what it does and shows how it is typed; every option and
argument has a line of help; docs/cli.md is what --help prints, command by command."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from nodus_gitops.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "cli.md"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


COMMANDS = sorted(_commands())


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_has_a_description_and_an_example(name: str) -> None:
    text = _commands()[name].format_help()
    command = _commands()[name]
    assert command.description and len(command.description) > 40, name
    examples = text.split("examples:\n", 1)[1].splitlines()
    assert examples and all(f"nodus-gitops {name}" in line for line in examples
                            if line.strip()), text


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_and_argument_has_help(name: str) -> None:
    for action in _commands()[name]._actions:
        assert action.help and action.help != argparse.SUPPRESS, (name, action.option_strings
                                                                  or action.dest)


def test_the_flags_people_asked_about_say_what_they_do() -> None:
    helps = {(name, opt): a.help for name, p in _commands().items() for a in p._actions
             for opt in (a.option_strings or [a.metavar or a.dest])}
    assert "name: kind/name" in helps[("get", "-o")]
    assert "changes" in helps[("get", "-w")]
    assert "Indexed Job" in helps[("logs", "--index")]
    assert "job, pipeline or sweep" in helps[("get", "KIND[/NAME]")]


def _reference_blocks(text: str) -> dict[str, str]:
    return {m["command"]: m["help"] + "\n" for m in re.finditer(
        r"^## `(?P<command>[^`]+)`\n\n```text\n(?P<help>.*?)\n```$", text, re.S | re.M)}


def test_docs_cli_md_is_what_help_prints() -> None:
    from nodus_gitops.cli_reference import COLUMNS, markdown

    assert REFERENCE.read_text() == markdown(), (
        "docs/cli.md is stale: python -m nodus_gitops.cli_reference > docs/cli.md")
    blocks = _reference_blocks(REFERENCE.read_text())
    assert set(blocks) == {"nodus-gitops", *(f"nodus-gitops {c}" for c in COMMANDS)}
    env = {**os.environ, "COLUMNS": COLUMNS}
    for command, text in blocks.items():
        done = subprocess.run([sys.executable, "-m", "nodus_gitops.cli", *command.split()[1:],
                               "--help"], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0 and done.stdout == text, command
