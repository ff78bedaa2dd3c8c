"""A run's log with a size cap: the supervisor reads the run's output from a pipe and
writes it here, keeping the first half of the cap in the log file as it comes and the
last half in a ring file of fixed size, which is appended after a line saying how many
bytes were cut when the run ends (the ring read, then removed first). A run can
therefore never have more than the cap on disk through its log, however much it prints.

A write the disk refuses (it is full) is dropped and counted, never raised: the
supervisor must keep its own records going.
"""

from __future__ import annotations

import os
from pathlib import Path


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


class LogSink:
    def __init__(self, path: Path, limit: int):
        self.path = path
        self.head_limit = max(1, limit // 2)
        self.tail_limit = max(1, limit - self.head_limit)
        self.head = 0  # bytes in the log file (notes aside)
        self.ring_bytes = 0  # bytes that went to the ring, all of them
        self.lost = 0  # bytes the disk refused
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)
        self._ring: int | None = None
        self._ring_path = path.with_name(f".{path.name}.tail")
        self.closed = False

    @property
    def cut(self) -> int:
        return max(0, self.ring_bytes - self.tail_limit)

    def _write(self, fd: int, data: bytes, offset: int | None = None) -> int:
        """Write all of `data` (at `offset` in a ring); returns the bytes written."""
        done = 0
        try:
            while done < len(data):
                chunk = memoryview(data)[done:]
                n = os.write(fd, chunk) if offset is None else os.pwrite(fd, chunk, offset + done)
                done += n
        except OSError:
            self.lost += len(data) - done
        return done

    def write(self, data: bytes) -> None:
        room = self.head_limit - self.head
        if room > 0:
            self.head += self._write(self._fd, data[:room])
            data = data[room:]
        if not data:
            return
        if self._ring is None:
            self._note(f"[nodus: this log passed {_size(self.head_limit)}; from here only its "
                       f"last {_size(self.tail_limit)} are kept, written when the run ends]")
            self._ring = os.open(self._ring_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC
                                 | os.O_CLOEXEC, 0o600)
        if len(data) > self.tail_limit:  # only its end can survive
            self.ring_bytes += len(data) - self.tail_limit
            data = data[-self.tail_limit:]
        while data:
            at = self.ring_bytes % self.tail_limit
            part = data[: self.tail_limit - at]
            self._write(self._ring, part, at)
            self.ring_bytes += len(part)
            data = data[len(part):]

    def _note(self, text: str) -> None:
        self._write(self._fd, f"\n{text}\n".encode())

    def _ring_in_order(self) -> bytes:
        assert self._ring is not None
        if self.ring_bytes <= self.tail_limit:
            return os.pread(self._ring, self.ring_bytes, 0)
        start = self.ring_bytes % self.tail_limit
        return (os.pread(self._ring, self.tail_limit - start, start)
                + os.pread(self._ring, start, 0))

    def close(self) -> None:
        """Append the kept tail after a line saying what was cut; idempotent."""
        if self.closed:
            return
        self.closed = True
        if self._ring is not None:
            try:
                tail = self._ring_in_order()
            except OSError:
                tail = b""
            # the ring's blocks go before the tail is written again: the log never takes
            # more than the cap on disk, even for a moment (what the disk floor counts)
            os.close(self._ring)
            self._ring = None
            self._ring_path.unlink(missing_ok=True)
            self._note(f"[nodus: {self.cut} bytes of this log were cut here: a run's log "
                       f"keeps its first {_size(self.head_limit)} and its last "
                       f"{_size(self.tail_limit)} (the local backend's maxLogBytes)]")
            self._write(self._fd, tail)
        if self.lost:
            self._note(f"[nodus: {self.lost} bytes of output were lost: the disk was full]")
        os.close(self._fd)
