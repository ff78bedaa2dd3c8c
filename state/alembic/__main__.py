"""`python -m nodus_gitops.state.alembic revision -m MESSAGE`: write the next revision into
state/alembic/versions from what state/models.py has and the head revision lacks, compared
with a scratch SQLite database (or `--state URL`) upgraded to head first. Review it."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from alembic import command
from nodus_gitops.state import engine as engines
from nodus_gitops.state import migrations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nodus_gitops.state.alembic",
        description="Alembic for the state store, without an alembic.ini.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    revision = commands.add_parser("revision", help="autogenerate the next revision")
    revision.add_argument("-m", "--message", required=True)
    revision.add_argument("--state", metavar="URL",
                          help="the database to compare the models with (default: a scratch "
                               "SQLite database)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nodus-gitops-revision-") as scratch:
        url = engines.resolve_url(args.state, Path(scratch))
        engine = engines.create_state_engine(url)
        try:
            with engines.write_engine(engine).begin() as conn:
                migrations.migrate(conn, engines.display(url))
            with engines.write_engine(engine).begin() as conn:
                head = migrations.head()
                command.revision(  # prints "Generating <path> ... done"
                    migrations.alembic_config(conn), message=args.message, autogenerate=True,
                    rev_id=f"{int(head) + 1:04d}" if head.isdigit() else None,
                )
        finally:
            engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
