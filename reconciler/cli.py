"""The `nodus-gitops` command line: parses arguments and maps errors to exit codes.

Exit codes: 0 success, 1 problems found (or a command failed), 2 usage error; `plan`
uses 2 for "changes pending" as `terraform plan -detailed-exitcode` does.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from nodus_gitops import __version__
from nodus_gitops.floor.errors import NodusGitopsError
from nodus_gitops.floor.quantities import DurationError, duration

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 on usage errors: keep that
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _duration(text: str) -> float:
    """A duration flag: the floor's one grammar (`90`, `90s`, `2m`, `1h30m`)."""
    try:
        return duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _sort_key(text: str):
    """`--sort-by`: a column or a field path (output.sort_key), checked as it is parsed."""
    from nodus_gitops.output import sort_key

    try:
        return sort_key(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _state_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", help="state directory (default ./.nodus-gitops, env "
                   "NODUS_GITOPS_HOME)")
    p.add_argument("--state", help="state database URL (default SQLite in the state "
                   "directory; postgresql+psycopg://... for PostgreSQL; env NODUS_GITOPS_STATE)")
    p.add_argument("--instance", help="this reconciler's name, in labels and check contexts "
                   "(env NODUS_GITOPS_INSTANCE)")
    p.add_argument("--config", help="YAML config file with repo bindings and providers")


def _repo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", help="Git URL or local path of the manifests repository")
    p.add_argument("--branch", help="branch to track (default: the local repository's "
                   "current branch, else main)")
    p.add_argument("--path", help="folder of the manifests inside the repository")
    p.add_argument("--project", help="Nodus project the repository feeds (default: default)")
    p.add_argument("--provider", help="compute backend (default: local)")
    p.add_argument("--binding", help="with --config: the binding to use")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nodus-gitops", description="GitOps reconciler for Nodus workloads.")
    parser.add_argument("--version", action="version", version=f"nodus-gitops {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("validate", help="check manifests against the schemas and rules")
    p.add_argument("paths", nargs="*", default=["."], metavar="PATH",
                   help="files or directories (default: .)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    p.set_defaults(func="cmd_validate")

    p = sub.add_parser("plan", help="show what a commit would change (exit 0 none, 2 "
                       "changes, 1 problems)")
    _repo_options(p)
    _state_options(p)
    p.add_argument("--ref", help="branch, tag, SHA or ref to plan (default: the branch tip)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    p.set_defaults(func="cmd_plan")

    p = sub.add_parser("reconcile", help="fetch, validate, plan and apply")
    _repo_options(p)
    _state_options(p)
    p.add_argument("--once", action="store_true", help="apply and return; without it, wait "
                   "until every resource has finished")
    p.add_argument("--timeout", type=_duration, help="how long to wait without --once (90, "
                   "90s, 2m)")
    p.set_defaults(func="cmd_reconcile")

    p = sub.add_parser("serve", help="run the reconciler and its dashboard")
    _repo_options(p)
    _state_options(p)
    p.add_argument("--interval", help="poll interval (default 30s, at least 1s)")
    p.add_argument("--listen", help="address of the dashboard and API (default "
                   "127.0.0.1:8080, env NODUS_GITOPS_LISTEN)")
    p.set_defaults(func="cmd_serve")

    p = sub.add_parser("get", help="list managed resources")
    p.add_argument("target", nargs="?", metavar="KIND[/NAME]")
    p.add_argument("-o", "--output", choices=["table", "wide", "json", "yaml", "name"],
                   default="table")
    p.add_argument("-w", "--watch", action="store_true")
    p.add_argument("--no-headers", action="store_true")
    p.add_argument("--sort-by", type=_sort_key, metavar="KEY")
    p.add_argument("-l", "--selector", help="only resources whose labels match: KEY=VALUE, "
                   "KEY!=VALUE or KEY, comma-separated (-l nodus.dev/pipeline=train-eval "
                   "lists a Pipeline's stage Jobs)")
    _state_options(p)
    p.set_defaults(func="cmd_get", repo=None)

    p = sub.add_parser("describe", help="one resource with its status and events")
    p.add_argument("target", metavar="KIND/NAME")
    _state_options(p)
    p.set_defaults(func="cmd_describe", repo=None)

    p = sub.add_parser("logs", help="a local Job's output")
    p.add_argument("target", metavar="job/NAME")
    p.add_argument("--index", type=int)
    p.add_argument("-f", "--follow", action="store_true")
    _state_options(p)
    p.set_defaults(func="cmd_logs", repo=None)

    p = sub.add_parser("cp", help="copy a local Job's output and verify its SHA-256")
    p.add_argument("source", metavar="job/NAME:outputs/OUTPUT")
    p.add_argument("dest")
    _state_options(p)
    p.set_defaults(func="cmd_cp", repo=None)

    p = sub.add_parser("crds", help="print CustomResourceDefinitions for Job, Pipeline and "
                       "Sweep, generated from the schemas (pipe to kubectl apply -f -)")
    p.set_defaults(func="cmd_crds")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        try:
            code = _command(args.func)(args)
        except NodusGitopsError as e:
            print(f"nodus-gitops {args.command}: {e}", file=sys.stderr)
            code = EXIT_PROBLEMS
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt:
        return 130


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """The command function `name` of `commands`, imported only now: `--help` and a
    usage error never load what the commands use (the store, Git, the backends)."""
    from nodus_gitops import commands

    return getattr(commands, name)


def _reader_gone() -> int:
    """Whoever read stdout stopped (`| head -3`): what they did not read is not wanted,
    so the command ends quietly with 0, as kubectl does. stdout goes to /dev/null so that
    Python's own flush at exit does not fail on the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
