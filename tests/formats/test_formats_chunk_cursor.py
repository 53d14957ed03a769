"""ChunkCursor: exact ranges out of sequential fetches, views without copies, bounded memory."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from storage_core.formats.source import ChunkCursor


class Recorder:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls: list[tuple[int, int]] = []
        self.returned: list[bytes] = []

    def __call__(self, start: int, end: int) -> bytes:
        self.calls.append((start, end))
        out = self.data[start:end]
        self.returned.append(out)
        return out


def test_ranges_match_the_data_for_any_chunk_and_step() -> None:
    data = os.urandom(10_000)
    for chunk in (1, 7, 256, 4096, 20_000):
        for step in (1, 13, 999, 5000):
            cursor = ChunkCursor(Recorder(data), 0, chunk)
            got = b"".join(cursor.take(p, p + step) for p in range(0, len(data), step))
            assert got == data, (chunk, step)


def test_a_range_inside_one_chunk_is_a_view_of_it_and_a_straddling_one_is_joined() -> None:
    data = os.urandom(4096)
    fetch = Recorder(data)
    cursor = ChunkCursor(fetch, 0, 1024)
    inside = cursor.view(0, 900)
    assert isinstance(inside, memoryview) and inside.obj is fetch.returned[0]
    assert inside == data[:900]
    straddling = cursor.view(1000, 1100)
    assert isinstance(straddling, bytes) and straddling == data[1000:1100]
    assert fetch.calls == [(0, 1024), (1024, 2048)]  # contiguous fetches, nothing fetched twice


def test_a_range_spanning_chunks_is_copied_once() -> None:
    # Slicing each chunk to bytes before joining doubled the bytes copied (and the fresh pages touched)
    # for every batch that straddles two prefetched blocks, about one per block.
    chunk = 1 << 20
    data = os.urandom(8 * chunk)
    cursor = ChunkCursor(Recorder(data), 0, chunk)
    start, end = chunk // 2, chunk // 2 + 3 * chunk
    cursor.view(0, 1)
    for k in range(2, 5):  # one chunk per fetch, outside the measurement
        cursor.view(start, k * chunk)
    assert [len(c) for c in cursor._chunks] == [chunk] * 4  # so the range cuts into the first and last
    tracemalloc.start()
    try:
        again = cursor.view(start, end)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert again == data[start:end]
    assert peak < 1.2 * (end - start)


def test_chunks_of_any_buffer_type_are_joined() -> None:
    data = os.urandom(5000)
    for kind in (bytes, bytearray, memoryview):
        cursor = ChunkCursor(lambda a, b, k=kind: k(data[a:b]), 0, 700)
        got = [cursor.take(p, p + 999) for p in range(0, len(data), 999)]
        assert all(isinstance(g, bytes) for g in got) and b"".join(got) == data, kind


def test_consumed_chunks_are_released() -> None:
    cursor = ChunkCursor(Recorder(os.urandom(100_000)), 0, 1000)
    for p in range(0, 100_000, 500):
        cursor.take(p, p + 500)
        assert len(cursor._chunks) <= 2  # memory stays about one chunk plus the range taken


def test_start_offset_end_of_data_and_moving_back() -> None:
    data = os.urandom(3000)
    cursor = ChunkCursor(Recorder(data), 1000, 512)
    assert cursor.take(1000, 1010) == data[1000:1010]
    assert cursor.take(2990, 3100) == data[2990:]  # short only at the end of the data
    assert cursor.take(3000, 3010) == b""
    with pytest.raises(ValueError, match="cannot move back"):
        cursor.take(500, 600)
