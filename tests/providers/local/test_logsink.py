"""A run's log keeps its head and its tail within the cap, and says what it cut."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from nodus_gitops.providers.local.logsink import LogSink

NOTE = re.compile(rb"\n\[nodus: [^\]]*\]\n")


def write_all(path: Path, limit: int, chunks: list[bytes]) -> bytes:
    sink = LogSink(path, limit)
    for chunk in chunks:
        sink.write(chunk)
    sink.close()
    return path.read_bytes()


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(min_value=2, max_value=64),
       chunks=st.lists(st.binary(min_size=0, max_size=40), max_size=12))
def test_the_log_is_the_head_and_the_tail_of_what_was_written(tmp_path_factory, limit, chunks):
    path = tmp_path_factory.mktemp("log") / "0-1.log"
    data = b"".join(chunks)
    kept = write_all(path, limit, chunks)
    head, tail = limit // 2, limit - limit // 2
    if len(data) <= head:
        assert kept == data  # nothing cut, nothing said
        return
    notes = NOTE.findall(kept)
    assert NOTE.sub(b"", kept) == data[:head] + data[max(head, len(data) - tail):]
    cut = len(data) - head - min(tail, len(data) - head)
    assert notes[-1].startswith(f"\n[nodus: {cut} bytes of this log were cut here".encode())
    assert not path.with_name(".0-1.log.tail").exists()


def test_a_flood_costs_the_disk_no_more_than_the_cap(tmp_path):
    path = tmp_path / "0-1.log"
    sink = LogSink(path, 1 << 20)
    line = b"x" * 1023 + b"\n"
    for _ in range(20 * 1024):  # 20 MiB
        sink.write(line)
        ring = path.with_name(".0-1.log.tail")
        on_disk = path.stat().st_size + (ring.stat().st_size if ring.exists() else 0)
        assert on_disk < (1 << 20) + 1024
    sink.close()
    assert path.stat().st_size < (1 << 20) + 1024
