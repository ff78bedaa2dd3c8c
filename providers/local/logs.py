"""Reading a Job's logs (`nodus logs job/x [-f]`): one index at a time, index 0 by
default, its latest attempt; following switches to a newer attempt when one starts and
ends when the Job is finished and the log is drained (`providers.logfiles`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from nodus_gitops.floor.errors import NotFoundError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.base import LogInfo
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local.rundir import RunDir, missing
from nodus_gitops.providers.logfiles import attempts, read_log


def _run(root: Path, key: ResourceKey) -> RunDir:
    try:
        run = RunDir.for_key(Path(root), key)
    except ValueError as exc:
        raise NotFoundError(str(exc)) from None
    if not run.exists():
        raise NotFoundError(missing(root, key))
    return run


def iter_logs(
    root: Path,
    key: ResourceKey,
    index: int | None = None,
    follow: bool = False,
    poll_seconds: float = 0.1,
) -> Iterator[str]:
    """Yield the log lines (without the newline) of one index's latest attempt."""
    run = _run(root, key)

    def finished(_attempt: int | None) -> bool:
        status = read_json(run.status) if run.exists() else None
        return status is None or is_terminal(status.get("phase"))

    return read_log(run.logs, 0 if index is None else index, follow=follow,
                    finished=finished, poll_seconds=poll_seconds)


def log_info(root: Path, key: ResourceKey, index: int = 0) -> LogInfo:
    """How many indexes the Job runs (spec.completions; a gang's ranks stand in its
    indexes' place), the attempts of `index` with a log, and the Job's phase, read from
    its run directory."""
    run = _run(root, key)
    doc = read_json(run.manifest, unreadable_is_missing=True) or {}
    spec = (doc.get("manifest") or {}).get("spec") or {}
    completions = (spec.get("distributed") or {}).get("nodes") or spec.get("completions")
    status = read_json(run.status, unreadable_is_missing=True) or {}
    return LogInfo(completions if isinstance(completions, int) and completions > 0 else 1,
                   tuple(attempts(run.logs, index)), status.get("phase"))
