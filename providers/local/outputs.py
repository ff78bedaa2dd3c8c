"""Declared outputs: their size and SHA-256 when a Job succeeds, and copying one out
with its hash checked (`nodus cp job/x:outputs/<name> DEST`).

A file's digest is the SHA-256 of its bytes. A directory's digest is the SHA-256 over
its sorted file list: one line `<relative path>\\0<size>\\0<sha256 of the file>\\n` per
file. Symbolic links are followed only when they resolve inside the outputs directory;
links that point outside it are left out (of the digest and of copies).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from providers.jsonfiles import read_json
from providers.local.rundir import RunDir
from providers.local.spec import Output, SpecError
from reconciler.errors import NotFoundError, PermanentError
from reconciler.identity import ResourceKey

_CHUNK = 1 << 20


class OutputError(Exception):
    """A declared output is missing or escapes the outputs directory."""


def _inside(path: Path, base: Path) -> bool:
    try:
        path.resolve().relative_to(base.resolve())
        return True
    except (ValueError, OSError):
        return False


def _file_sha(path: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _files(directory: Path, base: Path) -> list[tuple[str, Path]]:
    """(relative posix path, path) for every regular file under `directory`, sorted;
    links are followed only when they stay inside `base`."""
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=False):
        here = Path(dirpath)
        for d in list(dirnames):
            p = here / d
            if p.is_symlink():
                dirnames.remove(d)
                if _inside(p, base):  # a link to a directory inside: walk it too
                    found.extend(
                        (f"{p.relative_to(directory).as_posix()}/{r}", q)
                        for r, q in _files(p.resolve(), base)
                    )
        for name in filenames:
            p = here / name
            if p.is_symlink() and not _inside(p, base):
                continue
            if p.is_file():
                found.append((p.relative_to(directory).as_posix(), p))
    return sorted(found)


def digest(path: Path, base: Path) -> tuple[int, str]:
    """(size in bytes, sha256 hex) of a file or a directory under `base`."""
    if path.is_symlink() and not _inside(path, base):
        raise OutputError(f"{path} links outside the outputs directory")
    if path.is_file():
        return _file_sha(path)
    if not path.is_dir():
        raise OutputError(f"{path} was not written")
    h = hashlib.sha256()
    total = 0
    for rel, p in _files(path, base):
        size, sha = _file_sha(p)
        total += size
        h.update(f"{rel}\0{size}\0{sha}\n".encode())
    return total, h.hexdigest()


def collect(outputs_dir: Path, declared: tuple[Output, ...]) -> dict[str, dict]:
    """The `status.outputs` record of every declared output; `OutputError` names the
    first output that was not written."""
    result: dict[str, dict] = {}
    for out in declared:
        try:
            rel = out.relative
        except SpecError as exc:
            raise OutputError(str(exc)) from None
        path = outputs_dir / rel if rel else outputs_dir
        if not path.exists() and not path.is_symlink():
            raise OutputError(f"output {out.name!r} ({out.path}) was not written")
        size, sha = digest(path, outputs_dir)
        result[out.name] = {
            "path": out.path,
            "size": size,
            "sha256": sha,
            "type": "directory" if path.is_dir() else "file",
        }
    return result


def _copy_tree(src: Path, dest: Path, base: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for rel, p in _files(src, base):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target)


def output_path(root: Path, key: ResourceKey, output_name: str) -> Path:
    """Where a succeeded Job's stored output is on this machine (a Pipeline stage's input
    `path`). Raises NotFoundError when the Job or the output is not stored."""
    run = RunDir.for_key(Path(root), key)
    status = read_json(run.status) if run.exists() else None
    record = ((status or {}).get("outputs") or {}).get(output_name)
    if record is None:
        raise NotFoundError(f"{key.short} has no stored output {output_name!r}")
    rel = Output(output_name, record["path"]).relative
    return run.outputs / rel if rel else run.outputs


def copy_output(
    root: Path, key: ResourceKey, output_name: str, dest: Path | str
) -> tuple[Path, int, str]:
    """Copy a succeeded Job's output to `dest` (into it, when it is an existing
    directory) and check it against the SHA-256 recorded when the Job finished.
    Returns (path written, size, sha256). Raises NotFoundError / PermanentError."""
    run = RunDir.for_key(Path(root), key)
    status = read_json(run.status) if run.exists() else None
    if status is None:
        raise NotFoundError(f"{key.short} does not exist")
    record = (status.get("outputs") or {}).get(output_name)
    if record is None:
        known = ", ".join(sorted(status.get("outputs") or {})) or "none"
        raise NotFoundError(
            f"{key.short} has no stored output {output_name!r} (stored: {known}; outputs are "
            "stored when the Job succeeds)"
        )
    rel = Output(output_name, record["path"]).relative
    src = run.outputs / rel if rel else run.outputs
    dest = Path(dest)
    if dest.is_dir():
        dest = dest / (src.name if rel else output_name)
    tmp = dest.with_name(f".{dest.name}.partial")
    if tmp.exists():
        shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
    if record.get("type") == "directory" or src.is_dir():
        _copy_tree(src, tmp, run.outputs)
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
