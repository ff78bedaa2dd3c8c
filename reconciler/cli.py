"""The `nodus-gitops` command line: parses arguments and maps errors to exit codes.

Exit codes: 0 success, 1 problems found (or a command failed), 2 usage error; `plan`
uses 2 for "changes pending" as `terraform plan -detailed-exitcode` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from reconciler import __version__
from reconciler.errors import NodusGitopsError
from reconciler.manifests import iter_manifest_files
from reconciler.validation import resource_summary, validate_files

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 on usage errors: keep that
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def cmd_validate(args: argparse.Namespace) -> int:
    files = []
    for target in args.paths:
        if not Path(target).exists():
            print(f"nodus-gitops validate: {target}: no such file or directory", file=sys.stderr)
            return EXIT_USAGE
        files.extend(iter_manifest_files([target]))
    result = validate_files((display, path.read_bytes()) for display, path in files)
    if args.output == "json":
        print(json.dumps({
            "resources": [resource_summary(m) for m in result.manifests],
            "problems": [p.as_dict() for p in result.problems],
        }, indent=2))
    else:
        for problem in result.problems:
            print(problem)
        count = len(result.manifests)
        if result.ok:
            print(f"{count} resource{'s' if count != 1 else ''} in {len(files)} "
                  f"file{'s' if len(files) != 1 else ''}: valid")
        else:
            print(f"{len(result.problems)} problem{'s' if len(result.problems) != 1 else ''} "
                  f"in {count} resources", file=sys.stderr)
    return EXIT_OK if result.ok else EXIT_PROBLEMS


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nodus-gitops", description="GitOps reconciler for Nodus workloads.")
    parser.add_argument("--version", action="version", version=f"nodus-gitops {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    validate = commands.add_parser("validate", help="check manifests against the schemas and "
                                   "the platform's rules")
    validate.add_argument("paths", nargs="*", default=["."], metavar="PATH",
                          help="files or directories (default: .)")
    validate.add_argument("-o", "--output", choices=["text", "json"], default="text")
    validate.set_defaults(func=cmd_validate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except NodusGitopsError as e:
        print(f"nodus-gitops {args.command}: {e}", file=sys.stderr)
        return EXIT_PROBLEMS
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
