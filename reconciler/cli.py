"""The `nodus-gitops` command line: parses arguments and maps errors to exit codes.

Exit codes: 0 success, 1 problems found (or a command failed), 2 usage error; `plan`
uses 2 for "changes pending" as `terraform plan -detailed-exitcode` does. Remote mode
(`--server`): 3 the server cannot be reached, 4 it refused the token (401), 5 it serves
no API at that URL (remote.RemoteError carries the code).
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


_FORMAT = argparse.RawDescriptionHelpFormatter  # descriptions and examples as written


def _state_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", metavar="DIR", help="state directory (default: env "
                   "NODUS_GITOPS_HOME, else the config's stateDir, else ./.nodus-gitops)")
    p.add_argument("--state", metavar="URL", help="state database URL (default SQLite in the "
                   "state directory; postgresql+psycopg://... for PostgreSQL; env "
                   "NODUS_GITOPS_STATE)")
    p.add_argument("--instance", help="this reconciler's name, in labels and check contexts "
                   "(env NODUS_GITOPS_INSTANCE)")
    p.add_argument("--config", metavar="FILE", help="YAML config file with repo bindings and "
                   "providers (default: env NODUS_GITOPS_CONFIG, else "
                   "~/.config/nodus-gitops/config.yaml if there is one)")


def _server_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", metavar="URL", help="read a `nodus-gitops serve`'s JSON API "
                   "at URL instead of a local state (env NODUS_GITOPS_SERVER; its token from "
                   "env NODUS_GITOPS_TOKEN)")


def _repo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", metavar="URL|PATH", help="Git URL or local path of the "
                   "manifests repository")
    p.add_argument("--branch", help="branch to track (default: the local repository's "
                   "current branch, else main)")
    p.add_argument("--path", metavar="DIR", help="folder of the manifests inside the "
                   "repository")
    p.add_argument("--project", help="Nodus project the repository feeds (default: default)")
    p.add_argument("--provider", help="compute backend (default: local)")
    p.add_argument("--binding", metavar="ID", help="with --config: the binding to use")


_TARGET = ("job, pipeline or sweep (or jobs, pipelines, sweeps), alone for every resource "
           "of that kind or with /NAME for one")


def _subcommand(sub, name: str, summary: str, description: str,
                examples: str) -> argparse.ArgumentParser:
    """A subcommand whose --help says what it does and shows how it is typed."""
    return sub.add_parser(name, help=summary, description=description,
                          epilog="examples:\n" + examples, formatter_class=_FORMAT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="nodus-gitops", formatter_class=_FORMAT,
        description="GitOps reconciler for Nodus workloads: Job, Pipeline and Sweep manifests "
        "in Git,\nvalidated, planned and applied to a compute backend.",
        epilog="where it looks:\n"
        "  config  --config FILE, else NODUS_GITOPS_CONFIG, else "
        "~/.config/nodus-gitops/config.yaml\n"
        "  state   --state-dir DIR, else NODUS_GITOPS_HOME, else the config's stateDir, else\n"
        "          ./.nodus-gitops (or a database: --state URL, NODUS_GITOPS_STATE)\n"
        "  server  --server URL, else NODUS_GITOPS_SERVER: get, describe, logs, cp, plan and\n"
        "          sync ask a `serve`'s API instead (its token from NODUS_GITOPS_TOKEN)\n\n"
        "exit codes: 0 success, 1 problems found or the command failed, 2 usage error\n"
        "(plan: 2 when changes are pending); with --server: 3 server unreachable, 4 token\n"
        "refused (401), 5 no API at that URL. `nodus-gitops COMMAND --help` for each.")
    parser.add_argument("--version", action="version", version=f"nodus-gitops {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser,
                                metavar="COMMAND")

    p = _subcommand(sub, "validate", "check manifests against the schemas and rules",
                    "Check Job, Pipeline and Sweep manifests against the JSON Schemas and the\n"
                    "platform's rules. Every problem names the file, the line, the resource\n"
                    "and the field; all problems of all files come in one run. Reads only the\n"
                    "files it is given: no state, no config.",
                    "  nodus-gitops validate examples-repo\n"
                    "  nodus-gitops validate jobs/train.yaml -o json")
    p.add_argument("paths", nargs="*", default=["."], metavar="PATH",
                   help="files or directories (default: .)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text",
                   help="text: one line per problem; json: {resources, problems}")
    p.set_defaults(func="cmd_validate")

    p = _subcommand(sub, "plan", "show what a commit would change (exit 0 none, 2 changes, "
                    "1 problems)",
                    "Show what applying a commit would create, patch, replace or delete,\n"
                    "against what the state records; nothing is applied or written. Exit 0\n"
                    "when nothing would change, 2 when changes are pending, 1 for problems\n"
                    "or a blocked change. With --server, the server plans its binding\n"
                    "(--binding, or its only one) against its own state, and this prints\n"
                    "what it answers, masked as its dashboard masks.",
                    "  nodus-gitops plan --repo . --path examples-repo\n"
                    "  nodus-gitops plan --config config.yaml --binding team-a --ref "
                    "feature/x -o json\n"
                    "  nodus-gitops plan --server https://gitops.example --binding team-a "
                    "--ref refs/pull/7/head")
    _repo_options(p)
    _state_options(p)
    p.add_argument("--ref", help="branch, tag, SHA or ref to plan (default: the branch tip)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text",
                   help="text: the plan as people read it; json: every action and problem")
    _server_option(p)
    p.set_defaults(func="cmd_plan")

    p = _subcommand(sub, "reconcile", "fetch, validate, plan and apply",
                    "Fetch the repository, validate it, plan and apply the plan once, then\n"
                    "wait until every resource has finished (or return at once with --once).\n"
                    "A running `serve` of the same state applies new commits itself.",
                    "  nodus-gitops reconcile --repo . --path examples-repo --timeout 10m\n"
                    "  nodus-gitops reconcile --config config.yaml --binding team-a --once")
    _repo_options(p)
    _state_options(p)
    p.add_argument("--once", action="store_true", help="apply and return; without it, wait "
                   "until every resource has finished")
    p.add_argument("--timeout", type=_duration, metavar="DURATION", help="how long to wait "
                   "without --once (90, 90s, 2m, 1h30m)")
    p.set_defaults(func="cmd_reconcile")

    p = _subcommand(sub, "serve", "run the reconciler and its dashboard",
                    "Run the reconciler: poll every binding (or act on its webhook), apply\n"
                    "each new commit, follow the resources, and serve the dashboard and the\n"
                    "JSON API.",
                    "  nodus-gitops serve --repo . --path examples-repo --interval 5s\n"
                    "  nodus-gitops serve --config config.yaml --listen 0.0.0.0:8080")
    _repo_options(p)
    _state_options(p)
    p.add_argument("--interval", metavar="DURATION", help="poll interval (default 30s, at "
                   "least 1s)")
    p.add_argument("--listen", metavar="HOST:PORT", help="address of the dashboard and API "
                   "(default 127.0.0.1:8080, env NODUS_GITOPS_LISTEN)")
    p.add_argument("--log-format", choices=["auto", "text", "json"], default="auto",
                   metavar="FORMAT", help="stderr's log lines: text, short lines for people "
                   "(a sync of a commit: time, binding, commit, result, counts); json, one "
                   "object a line; auto (default): text on a terminal, json elsewhere")
    p.set_defaults(func="cmd_serve")

    p = _subcommand(sub, "get", "list managed resources",
                    "List the resources the state records, as the reconciler last saw them.\n"
                    "`get jobs` lists the Jobs of Pipeline stages and Sweep cells too, with a\n"
                    "PARENT column. Reads the state only: it never creates it.",
                    "  nodus-gitops get\n"
                    "  nodus-gitops get jobs -l team=ml --sort-by cost\n"
                    "  nodus-gitops get job/hello -o yaml\n"
                    "  nodus-gitops get pipelines -o name | xargs -n1 nodus-gitops describe\n"
                    "  nodus-gitops get jobs --watch\n"
                    "  nodus-gitops get jobs -w -o json --output-watch-events | jq .type")
    p.add_argument("target", nargs="?", metavar="KIND[/NAME]", help=_TARGET)
    p.add_argument("-o", "--output", choices=["table", "wide", "json", "yaml", "name"],
                   default="table", help="table (default); wide: the offering, rate, progress "
                   "and source too; json or yaml: the whole documents; name: kind/name a line")
    p.add_argument("-w", "--watch", action="store_true", help="after the listing, print "
                   "each resource again as it changes (checked every 2 s; Ctrl-C ends)")
    p.add_argument("--output-watch-events", action="store_true", help="with -o json or "
                   "yaml: print each change as an event {type: ADDED, MODIFIED or DELETED, "
                   "object} (-o json: one line each, for scripts)")
    p.add_argument("--no-headers", action="store_true", help="leave out the table's title row")
    p.add_argument("--sort-by", type=_sort_key, metavar="KEY", help="order by a column (cost, "
                   "age, phase, ...) or a field of -o json (.status.phase, .createdAt)")
    p.add_argument("-l", "--selector", help="only resources whose labels match: KEY=VALUE, "
                   "KEY!=VALUE or KEY, comma-separated (-l nodus.dev/pipeline=train-eval "
                   "lists a Pipeline's stage Jobs)")
    _state_options(p)
    _server_option(p)
    p.set_defaults(func="cmd_get", repo=None)

    p = _subcommand(sub, "describe", "one resource with its status and events",
                    "One resource in full: phase, reason and fix, cost, source, status,\n"
                    "outputs and events (the reconciler's and its backend's). A stage's or\n"
                    "a cell's Job shows its Pipeline or Sweep.",
                    "  nodus-gitops describe job/hello\n"
                    "  nodus-gitops describe job/train-eval-train   # a Pipeline's stage")
    p.add_argument("target", metavar="KIND/NAME", help="job/NAME, pipeline/NAME or sweep/NAME")
    _state_options(p)
    _server_option(p)
    p.set_defaults(func="cmd_describe", repo=None)

    p = _subcommand(sub, "logs", "a Job's output",
                    "What a Job's command printed, read from its backend (local and Slurm).\n"
                    "An Indexed Job shows index 0 unless --index names another (stderr says\n"
                    "so). Control characters are shown escaped on a terminal; a pipe or a\n"
                    "file gets the log as written.",
                    "  nodus-gitops logs job/hello\n"
                    "  nodus-gitops logs job/indexed-outputs --index 2\n"
                    "  nodus-gitops logs job/train-eval-train -f")
    p.add_argument("target", metavar="job/NAME", help="the Job (a stage's or a cell's too)")
    p.add_argument("--index", type=int, metavar="N", help="which index of an Indexed Job "
                   "(a gang's rank) to show (default 0)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing as the Job "
                   "writes, until it ends")
    _state_options(p)
    _server_option(p)
    p.set_defaults(func="cmd_logs", repo=None)

    p = _subcommand(sub, "cp", "copy a Job's output and verify its SHA-256",
                    "Copy a finished Job's declared output to DEST, checked against the\n"
                    "SHA-256 recorded when the Job finished (local and Slurm). With\n"
                    "--server, the server sends it (only where its dashboard has a token)\n"
                    "and it is checked again here before it is written.",
                    "  nodus-gitops cp job/hello:outputs/report ./report.json\n"
                    "  nodus-gitops cp job/gang:outputs/rank-1/result ./rank1\n"
                    "  NODUS_GITOPS_TOKEN=... nodus-gitops cp job/hello:outputs/report . "
                    "--server https://gitops.example")
    p.add_argument("source", metavar="job/NAME:outputs/OUTPUT", help="the Job and the name "
                   "of one of its outputs")
    p.add_argument("dest", metavar="DEST", help="file or directory to copy to")
    _state_options(p)
    _server_option(p)
    p.set_defaults(func="cmd_cp", repo=None)

    p = _subcommand(sub, "sync", "ask a running serve to fetch a binding now",
                    "Ask a `nodus-gitops serve` (--server URL or NODUS_GITOPS_SERVER) to\n"
                    "poll BINDING now. With --wait, follow that poll to its result: exit 0\n"
                    "when its commit is applied (applied, noop) or there was nothing new,\n"
                    "1 when it was invalid, blocked, partial or an error, or on --timeout.",
                    "  nodus-gitops sync ml-team --server http://127.0.0.1:8080\n"
                    "  NODUS_GITOPS_SERVER=https://gitops.example nodus-gitops sync ml-team "
                    "--wait --timeout 5m")
    p.add_argument("binding", metavar="BINDING", help="the repo binding's id (as the "
                   "dashboard and `GET /api/v1/repos` name it)")
    p.add_argument("--wait", action="store_true", help="follow the sync to its result and "
                   "exit by it")
    p.add_argument("--timeout", type=_duration, default=600.0, metavar="DURATION",
                   help="how long --wait waits (default 10m; 90, 90s, 2m, 1h30m)")
    _server_option(p)
    p.set_defaults(func="cmd_sync")

    p = _subcommand(sub, "doctor", "check that this machine and the config can run Jobs",
                    "Check what the configured backends, the state store and the Git remotes\n"
                    "need, a line each: ok, note (it works, with a caveat) or FAIL, what was\n"
                    "seen, and under a failure the fix. The local backend's verdict is the one\n"
                    "it reaches at start-up. Only reads: no state is made or migrated. Exit 0\n"
                    "when nothing failed, 1 otherwise.",
                    "  nodus-gitops doctor\n"
                    "  nodus-gitops doctor --repo . --path examples-repo\n"
                    "  nodus-gitops doctor --config config.yaml -o json")
    _repo_options(p)
    _state_options(p)
    p.add_argument("-o", "--output", choices=["text", "json"], default="text",
                   help="text: a line a check, the fix under a failure; json: {ok, checks}")
    p.set_defaults(func="cmd_doctor")

    p = _subcommand(sub, "crds", "print CustomResourceDefinitions for Job, Pipeline and "
                    "Sweep, generated from the schemas (pipe to kubectl apply -f -)",
                    "Print CustomResourceDefinitions for Job, Pipeline and Sweep, generated\n"
                    "from the JSON Schemas, so that Kubernetes tools can validate manifests.",
                    "  nodus-gitops crds | kubectl apply -f -")
    p.set_defaults(func="cmd_crds")

    p = _subcommand(sub, "completion", "print the shell completion script for bash, zsh or "
                    "fish",
                    "Print a script that completes commands, flags, their values, kinds and\n"
                    "resource names (from the state) as you type. Load it in the shell's\n"
                    "start-up file, or save it where the shell looks for completions.",
                    "  source <(nodus-gitops completion bash)    # in ~/.bashrc\n"
                    "  source <(nodus-gitops completion zsh)     # in ~/.zshrc, after "
                    "compinit\n"
                    "  nodus-gitops completion fish > ~/.config/fish/completions/"
                    "nodus-gitops.fish")
    p.add_argument("shell", choices=["bash", "zsh", "fish"], help="the shell to complete in")
    p.set_defaults(func="cmd_completion")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["__complete"]:  # what the completion scripts ask, not a command
            from nodus_gitops.completion import main_complete

            return main_complete(build_parser(), argv[1:], lambda args, kind: _command(
                "state_names")(args, kind))
        args = build_parser().parse_args(argv)
        try:
            code = _command(args.func)(args)
        except NodusGitopsError as e:
            print(f"nodus-gitops {args.command}: {e}", file=sys.stderr)
            code = getattr(e, "exit_code", EXIT_PROBLEMS)  # remote mode's own codes
        except PermissionError as e:  # a state or a file of another user's (0700, 0600)
            print(f"nodus-gitops {args.command}: {e.filename or 'a file'}: permission "
                  "denied: run as the user that owns it, or name one this user can read "
                  "(--state-dir, --config, the paths given)", file=sys.stderr)
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
