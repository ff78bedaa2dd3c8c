"""`cp --server`: a Job's stored output fetched from a `serve` (web/outputs) and checked
here, against the SHA-256 the backend recorded when the Job finished, with the same
digest the local copy uses; written to DEST only once it matches, as the local `cp`.

A directory comes as a tar archive, unpacked with tarfile's `data` filter (no absolute
paths, no links out of it, no device files)."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from urllib.parse import quote

from nodus_gitops.floor.destinations import refuse_special
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.local.outputs import digest
from nodus_gitops.remote import Client, RemoteError, resource_path
from nodus_gitops.web.outputs import NAME_HEADER, SHA256_HEADER, TYPE_HEADER

CHUNK = 1 << 20
TIMEOUT = 300.0  # the server copies (and checks) the output before it sends a byte


def copy_remote_output(client: Client, key: ResourceKey, output: str,
                       dest: Path) -> tuple[Path, int, str]:
    """Fetch `output` of the Job `key` into `dest` (into it, when it is a directory):
    (path written, size, sha256). RemoteError when the server refuses or the bytes that
    arrived are not the ones it recorded."""
    path = f"{resource_path(key)}/outputs/{quote(output, safe='/')}"
    if not dest.is_dir():
        refuse_special(dest)
    with tempfile.TemporaryDirectory(prefix=".nodus-cp-", dir=_parent(dest)) as work:
        received = Path(work) / "received"
        with client.reply("GET", path, TIMEOUT) as reply, received.open("wb") as out:
            headers = {k.lower(): v for k, v in dict(reply.headers).items()}
            shutil.copyfileobj(reply, out, CHUNK)
        recorded = headers.get(SHA256_HEADER.lower(), "")
        name = Path(headers.get(NAME_HEADER.lower()) or output).name
        if not recorded or not name or name in (".", ".."):
            raise RemoteError(f"{client.url} sent job/{key.name}:outputs/{output} without "
                              "its recorded SHA-256: is it a `nodus-gitops serve` of this "
                              "version?")
        copy = Path(work) / "copy"
        if headers.get(TYPE_HEADER.lower()) == "directory":
            with tarfile.open(received) as tar:
                tar.extractall(copy, filter="data")
            copy = copy / name
            if not copy.is_dir():
                raise RemoteError(f"{client.url} sent an archive without {name}/")
        else:
            copy = received
        size, sha = digest(copy, copy)
        if sha != recorded:
            raise RemoteError(f"job/{key.name}:outputs/{output}: what arrived has sha256 "
                              f"{sha[:12]}, not the recorded {recorded[:12]}; nothing was "
                              "written (try again)")
        target = dest / name if dest.is_dir() else dest
        refuse_special(target)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(copy, target)
    return target, size, sha


def _parent(dest: Path) -> Path:
    """Where the copy is made before it takes its place: beside it, on its filesystem."""
    folder = dest if dest.is_dir() else dest.parent
    folder.mkdir(parents=True, exist_ok=True)  # as the local copy makes it
    return folder
