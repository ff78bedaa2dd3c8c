"""Where `cp` may write: a regular file (made or replaced) or into a directory, never
over anything else. A copy takes its place by rename, so a device node, a FIFO, a socket
or a symbolic link at the destination would itself be replaced by a regular file: run as
root, `cp job/x:outputs/y /dev/null` replaced the machine's /dev/null."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nodus_gitops.floor.errors import ConfigError

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


def refuse_special(path: Path) -> None:
    """ConfigError when `path` exists and is neither a regular file nor a directory."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    for test, kind in _KINDS:
        if test(mode):
            raise ConfigError(f"{path} is {kind}: cp writes a regular file in its place "
                              "(or into a directory); name a file path or a directory")
