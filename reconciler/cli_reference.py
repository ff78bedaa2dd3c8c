"""The command line's reference, docs/cli.md, generated from the parser itself: the
`--help` of `nodus-gitops` and of each command exactly as they print it, 100 columns
wide, so that the two cannot drift (tests/reconciler/test_cli_help.py compares them).

Regenerate with `python -m nodus_gitops.cli_reference > docs/cli.md`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

COLUMNS = "100"  # the terminal width the reference is printed for (COLUMNS=100)


def help_texts() -> Iterator[tuple[str, str]]:
    """(the command line, what its `--help` prints) for `nodus-gitops` and each command,
    as a terminal of COLUMNS columns shows them."""
    import argparse

    from nodus_gitops.cli import build_parser

    was = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = COLUMNS  # argparse reads the width from the environment
    try:
        parser = build_parser()
        yield "nodus-gitops", parser.format_help()
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for name, command in commands.choices.items():
            yield f"nodus-gitops {name}", command.format_help()
    finally:
        if was is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = was


def markdown() -> str:
    parts = ["# nodus-gitops command reference", "",
             "Generated from the command line's own `--help` (`python -m "
             "nodus_gitops.cli_reference > docs/cli.md`); a test fails when the two differ.",
             ""]
    for command, text in help_texts():
        parts += [f"## `{command}`", "", "```text", text.rstrip("\n"), "```", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    print(markdown(), end="")
