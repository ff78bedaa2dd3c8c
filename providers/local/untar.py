"""Unpacking a source archive within limits: `python untar.py DEST MAX_ENTRIES MAX_BYTES`
reads a tar stream on stdin and unpacks it into DEST with tarfile's `data` filter.

The archive comes from a repository a manifest names, so it is hostile: this runs inside
the fetch's sandbox, as the run user, where DEST is the only writable place of the host
(tarfile's filter has had bypasses, CVE-2025-4517 among them). It imports nothing of the
project: the sandbox binds this one file.

On stderr: `nodus-skipped N` (entries the filter left out: links leaving DEST, absolute
links), or `nodus-refused MESSAGE` with exit status 4 past a limit or on a broken archive.
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path
from typing import IO

REFUSED = 4
FILTER_SINCE = (3, 11, 4)  # tarfile's extraction filters (PEP 706)


class ArchiveRefused(Exception):
    """Past a limit, or not a readable tar archive; the message says which."""


def extract_limited(stream: IO[bytes], dest: Path, *, max_entries: int, max_bytes: int) -> int:
    """Unpack a tar stream into `dest`, refusing it past `max_entries` entries or
    `max_bytes` of files. Returns how many entries the filter left out."""
    entries = expanded = skipped = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                entries += 1
                if entries > max_entries:
                    raise ArchiveRefused(f"the source has more than {max_entries} entries")
                if member.isfile():
                    expanded += member.size
                    if expanded > max_bytes:
                        raise ArchiveRefused(
                            f"the source expands to more than {max_bytes >> 20} MiB")
                try:
                    tar.extract(member, dest, filter="data")
                except tarfile.FilterError:
                    skipped += 1
    except (tarfile.TarError, OSError) as exc:
        raise ArchiveRefused(f"the source archive cannot be unpacked: {exc}") from None
    return skipped


def main(argv: list[str]) -> int:
    dest, max_entries, max_bytes = Path(argv[0]), int(argv[1]), int(argv[2])
    if sys.version_info < FILTER_SINCE:  # never unpack without the filter
        print(f"nodus-refused unpacking a source needs Python 3.11.4 or later (tarfile's data "
              f"filter); the supervisors run {sys.version.split()[0]} ({sys.executable})",
              file=sys.stderr)
        return REFUSED
    try:
        skipped = extract_limited(sys.stdin.buffer, dest, max_entries=max_entries,
                                  max_bytes=max_bytes)
    except ArchiveRefused as exc:
        print(f"nodus-refused {exc}", file=sys.stderr)
        return REFUSED
    print(f"nodus-skipped {skipped}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
