"""LocalRanges (storage_core/adapters/local_ranges.py): a file:// tier's byte ranges read straight from its
files, and a read that must not wait says NotReady instead of waiting for the disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage_core.adapters import local_ranges
from storage_core.adapters.local_ranges import LocalRanges
from storage_core.errors import RemoteObjectNotFound
from storage_core.gateway.ranges import NotReady


@pytest.fixture
def segment(tmp_path: Path) -> tuple[Path, bytes]:
    data = os.urandom(3 * 4096 + 123)
    path = tmp_path / "00000000000000000000-segment.log"
    path.write_bytes(data)
    return path, data


def test_ranges_are_the_file_s_bytes_cut_at_the_object_size(segment: tuple[Path, bytes]) -> None:
    path, data = segment
    ranges = LocalRanges(read_ahead_bytes=8192)
    assert bytes(ranges.read(str(path), 100, 5000, len(data))) == data[100:5000]
    assert bytes(ranges.read(str(path), 4096, 1 << 20, len(data))) == data[4096:], "cut at the size"
    assert ranges.read(str(path), 500, 500, len(data)) == b""
    # An object shorter than its metadata says: what is there, for the caller to find the batch cut.
    assert bytes(ranges.read(str(path), 0, len(data) + 50, len(data) + 50)) == data


def test_a_resident_range_is_read_without_waiting_and_counted_a_hit(segment: tuple[Path, bytes]) -> None:
    path, data = segment
    hits: list[bool] = []
    ranges = LocalRanges()
    ranges.observe(hits.append)
    ranges.read(str(path), 0, len(data), len(data))  # just written and read: in the page cache
    assert bytes(ranges.read(str(path), 10, 20, len(data), nowait=True)) == data[10:20]
    assert hits == [True], "only reads that must not wait are counted"


def test_a_range_not_in_memory_is_not_ready_instead_of_a_wait(
    segment: tuple[Path, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, data = segment
    flags_seen: list[int] = []

    def would_block(fd: int, buffers: list[memoryview], offset: int, flags: int = 0) -> int:
        flags_seen.append(flags)
        raise BlockingIOError(11, "Resource temporarily unavailable")

    hits: list[bool] = []
    ranges = LocalRanges()
    ranges.observe(hits.append)
    monkeypatch.setattr(local_ranges.os, "preadv", would_block)
    with pytest.raises(NotReady):
        ranges.read(str(path), 0, 100, len(data), nowait=True)
    assert flags_seen == [os.RWF_NOWAIT] and hits == [False]


def test_a_file_removed_by_retention_is_a_missing_object(tmp_path: Path) -> None:
    with pytest.raises(RemoteObjectNotFound):
        LocalRanges().read(str(tmp_path / "gone.log"), 0, 10, 10)


def test_read_ahead_is_advised_again_only_once_half_of_it_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(64 * 1024)
    path = tmp_path / "00000000000000000000-segment.log"
    path.write_bytes(data)
    advised: list[tuple[int, int]] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append((offset, length))
        real(fd, offset, length, advice)

    monkeypatch.setattr(local_ranges.os, "posix_fadvise", record)
    ranges = LocalRanges(read_ahead_bytes=16 * 1024)
    for start in range(0, 40 * 1024, 4096):  # a consumer reading 4 KiB after 4 KiB
        assert bytes(ranges.read(str(path), start, start + 4096, len(data))) == data[start : start + 4096]
    # Advised at 4 KiB (up to 20 KiB), again once a read ends past 12 KiB, and so on: every third read.
    assert advised == [(4096, 16384), (16384, 16384), (28672, 16384), (40960, 16384)]
    ranges.read(str(path), 0, 4096, len(data))  # a seek back: advised anew from there
    assert advised[-1] == (4096, 16384)
    ranges.read(str(path), 60 * 1024, 64 * 1024, len(data))  # the object's end: nothing ahead to advise
    assert advised[-1] == (4096, 16384)
