"""Declared outputs: a succeeded run's files joining the Job's outputs, their size and
SHA-256 when a Job succeeds, and copying one out with its hash checked (`nodus cp
job/x:outputs/<name> DEST`).

A file's digest is the SHA-256 of its bytes. A directory's digest is the SHA-256 over
its sorted file list: one line `<relative path>\\0<size>\\0<sha256 of the file>\\n` per
file.

The outputs directory was written by the Job, so nothing in it is trusted:

- a declared path is resolved, links in every component included, and must end inside
  the outputs directory (a link anywhere along it to the host fails the Job);
- in a directory, a link to a regular file inside the outputs directory is stored under
  its own name; links to directories (they could loop or multiply), links that leave
  the outputs directory and special files (FIFOs, sockets, devices) are left out;
- every name counts, so a file stored under many names (links, hard links) counts
  each time: past `max_bytes` the output is refused (`OutputTooLarge`) before anything
  is hashed, and a file with several names is hashed once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from nodus_gitops.floor.destinations import refuse_special
from nodus_gitops.floor.errors import NotFoundError, PermanentError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local import runfs
from nodus_gitops.providers.local.rundir import RunDir, missing
from nodus_gitops.providers.local.spec import Output, SpecError

_CHUNK = 1 << 20


class OutputError(Exception):
    """A declared output is missing or escapes the outputs directory."""


class OutputTooLarge(OutputError):
    """The declared outputs name more bytes than the cap, counting every name."""


def merge(run_outputs: Path, outputs_dir: Path) -> list[str]:
    """Move what a succeeded run wrote into the Job's outputs; returns the paths (relative,
    posix) that replaced what an earlier run had stored there. Called once every process
    of the run is gone: links are moved as links, never followed, and a directory only
    merges into a directory (not a link to one)."""
    replaced: list[str] = []

    def move(src: Path, dest: Path, rel: str) -> None:
        for entry in sorted(os.scandir(src), key=lambda e: e.name):
            target = dest / entry.name
            name = f"{rel}{entry.name}"
            if entry.is_dir(follow_symlinks=False) and target.is_dir() and not target.is_symlink():
                move(Path(entry.path), target, f"{name}/")
                continue
            if os.path.lexists(target):
                replaced.append(name)
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                else:
                    target.unlink()
            os.replace(entry.path, target)

    if run_outputs.is_dir():
        move(run_outputs, outputs_dir, "")
    shutil.rmtree(run_outputs, ignore_errors=True)
    return replaced


def _real_inside(path: Path, base: Path) -> Path | None:
    """`path` with every link along it resolved, when that exists inside `base`."""
    try:
        real = path.resolve(strict=True)
        root = base.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a loop of links
        return None
    return real if real == root or root in real.parents else None


def _file_sha(path: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _files(directory: Path, base: Path) -> list[tuple[str, Path]]:
    """(relative posix path, the file it names) for what a directory output stores,
    sorted: its regular files, and its links to regular files inside `base`."""
    found: list[tuple[str, Path]] = []
    for dirpath, _dirnames, filenames in os.walk(directory, followlinks=False):
        here = Path(dirpath)
        for name in filenames:
            p = here / name
            target = _real_inside(p, base) if p.is_symlink() else p
            if target is not None and target.is_file():
                found.append((p.relative_to(directory).as_posix(), target))
    return sorted(found)


def _listing(path: Path, base: Path, shown: str) -> tuple[Path, list[tuple[str, Path]]]:
    """(the output's real path, the files it stores: ("", itself) for a file); errors
    name the output as the Job sees it (`shown`, /nodus/outputs/...), never this host's
    directory for it."""
    real = _real_inside(path, base)
    if real is None:
        if path.exists():
            raise OutputError(f"{shown} links outside the outputs directory")
        raise OutputError(f"{shown} was not written")
    if real.is_file():
        return real, [("", real)]
    if real.is_dir():
        return real, _files(real, base)
    raise OutputError(f"{shown} is neither a regular file nor a directory")


def _hash_listing(files: list[tuple[str, Path]], seen: dict[tuple[int, int], tuple[int, str]],
                  ) -> tuple[int, str]:
    """(bytes, digest) of a listing; `seen` hashes a file with several names once."""
    def sha(p: Path) -> tuple[int, str]:
        st = os.stat(p)
        ident = (st.st_dev, st.st_ino)
        if ident not in seen:
            seen[ident] = _file_sha(p)
        return seen[ident]

    if len(files) == 1 and files[0][0] == "":
        return sha(files[0][1])
    h = hashlib.sha256()
    total = 0
    for rel, p in files:
        size, digest_ = sha(p)
        total += size
        h.update(f"{rel}\0{size}\0{digest_}\n".encode())
    return total, h.hexdigest()


def _listed_bytes(files: list[tuple[str, Path]]) -> int:
    return sum(os.stat(p).st_size for _, p in files)


def digest(path: Path, base: Path) -> tuple[int, str]:
    """(size in bytes, sha256 hex) of a file or a directory under `base`."""
    _, files = _listing(path, base, str(path))
    return _hash_listing(files, {})


def collect(outputs_dir: Path, declared: tuple[Output, ...],
            max_bytes: int | None = None) -> dict[str, dict]:
    """The `status.outputs` record of every declared output. `OutputError` names the
    first output that was not written or leads out of `outputs_dir`; `OutputTooLarge`
    says the outputs name more than `max_bytes` (checked before anything is hashed)."""
    listed: list[tuple[Output, Path, list[tuple[str, Path]]]] = []
    for out in declared:
        try:
            rel = out.relative
        except SpecError as exc:
            raise OutputError(str(exc)) from None
        path = outputs_dir / rel if rel else outputs_dir
        listed.append((out, *_listing(path, outputs_dir, out.path)))
    total = sum(_listed_bytes(files) for _, _, files in listed)
    if max_bytes is not None and total > max_bytes:
        raise OutputTooLarge(
            f"the declared outputs hold {total} bytes (a file counts once for each of its "
            f"names), more than the local backend's maxOutputBytes ({max_bytes})")
    seen: dict[tuple[int, int], tuple[int, str]] = {}
    result: dict[str, dict] = {}
    for out, real, files in listed:
        size, sha = _hash_listing(files, seen)
        result[out.name] = {
            "path": out.path,
            "size": size,
            "sha256": sha,
            "type": "directory" if real.is_dir() else "file",
        }
    return result


def _copy_tree(src: Path, dest: Path, base: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for rel, p in _files(src, base):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target)


def stored_path(outputs_dir: Path, key: ResourceKey, output_name: str, record: dict) -> Path:
    """The real path of a recorded output, checked again to lie inside the outputs."""
    rel = Output(output_name, record["path"]).relative
    real = _real_inside(outputs_dir / rel if rel else outputs_dir, outputs_dir)
    if real is None:
        raise PermanentError(f"{key.short}:outputs/{output_name} is no longer inside the "
                             "Job's outputs directory; the stored output changed after the "
                             "Job finished")
    return real


def output_path(root: Path, key: ResourceKey, output_name: str) -> Path:
    """Where a succeeded Job's stored output is on this machine (a Pipeline stage's input
    `path`). Raises NotFoundError when the Job or the output is not stored, and
    PermanentError when it no longer lies inside the Job's outputs directory. Where the
    Job has a filesystem of its own, the path is in it: mounted by the runs that read
    it (`runfs.readable` mounts it on the host)."""
    run = RunDir.for_key(Path(root), key)
    status = read_json(run.status) if run.exists() else None
    record = ((status or {}).get("outputs") or {}).get(output_name)
    if record is None:
        raise NotFoundError(f"{key.short} has no stored output {output_name!r}")
    # the Job's own filesystem, unmounted when it finished, is looked at through a mount
    # made for the look: the runs that take the output as an input mount it themselves
    with runfs.reading(run.disk) as problem:
        if problem is not None:
            raise PermanentError(f"{key.short}:outputs/{output_name}: {problem}")
        return stored_path(run.outputs, key, output_name, record)


def copy_output(
    root: Path, key: ResourceKey, output_name: str, dest: Path | str
) -> tuple[Path, int, str]:
    """Copy a succeeded Job's output to `dest` (into it, when it is an existing
    directory) and check it against the SHA-256 recorded when the Job finished.
    Returns (path written, size, sha256). Raises NotFoundError / PermanentError."""
    run = RunDir.for_key(Path(root), key)
    status = read_json(run.status) if run.exists() else None
    if status is None:
        raise NotFoundError(missing(root, key))
    outputs = status.get("outputs") or {}
    recorded(key, output_name, outputs)
    with runfs.reading(run.disk) as problem:
        if problem is not None:
            raise PermanentError(f"{key.short}:outputs/{output_name}: {problem}")
        return copy_recorded(run.outputs, key, output_name, outputs, dest)


def recorded(key: ResourceKey, output_name: str, outputs: dict[str, dict]) -> dict:
    """The record of one stored output; NotFoundError naming those stored when none."""
    record = outputs.get(output_name)
    if record is None:
        known = ", ".join(sorted(outputs)) or "none"
        raise NotFoundError(
            f"{key.short} has no stored output {output_name!r} (stored: {known}; outputs are "
            "stored when the Job succeeds)"
        )
    return record


def copy_recorded(outputs_dir: Path, key: ResourceKey, output_name: str,
                  outputs: dict[str, dict], dest: Path | str) -> tuple[Path, int, str]:
    """Copy one output of a Job's `outputs_dir` (recorded in `outputs`, its
    `status.outputs`) to `dest` and check it against the recorded SHA-256: what `nodus
    cp` does on every backend whose outputs are files on this machine."""
    record = recorded(key, output_name, outputs)
    dest = Path(dest)
    rel = Output(output_name, record["path"]).relative
    src = stored_path(outputs_dir, key, output_name, record)
    if dest.is_dir():
        dest = dest / (Path(rel).name if rel else output_name)
    refuse_special(dest)
    tmp = dest.with_name(f".{dest.name}.partial")
    if tmp.exists():
        shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
    if src.is_dir():
        _copy_tree(src, tmp, outputs_dir)
    else:
        tmp.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, tmp)
    size, sha = digest(tmp, tmp)
    if sha != record["sha256"]:
        shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
        raise PermanentError(
            f"{key.short}:outputs/{output_name}: the copy's sha256 {sha[:12]} does not match "
            f"the recorded {record['sha256'][:12]}; the stored output changed after the Job "
            "finished"
        )
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest, size, sha
