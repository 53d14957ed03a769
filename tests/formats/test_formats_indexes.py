"""Offset, time and transaction indexes: entries, floor lookups, and the zero-filled tail of an active
segment's preallocated index. Index bytes are packed here with struct, independently of our encoders."""

from __future__ import annotations

import bisect
import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_core.errors import CorruptDataError
from storage_core.formats.indexes import (
    AbortedTxn,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
    iter_txn_index,
)
from storage_core.formats.source import bytes_fetcher

BASE = 5_000_000


def _offset_entries(count: int) -> list[tuple[int, int]]:
    return [(i * 17 + 3, 4100 * (i + 1) + i) for i in range(count)]


def _offset_index_bytes(entries: list[tuple[int, int]], preallocated_entries: int = 0) -> bytes:
    data = b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries)
    return data + b"\x00" * 8 * max(0, preallocated_entries - len(entries))


def _time_index_bytes(entries: list[tuple[int, int]], preallocated_entries: int = 0) -> bytes:
    data = b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries)
    return data + b"\x00" * 12 * max(0, preallocated_entries - len(entries))


@pytest.mark.parametrize("count", [0, 1, 2, 7, 1000])
@pytest.mark.parametrize("preallocated", [0, 1, 1310])
def test_offset_index_stops_at_the_zero_tail(count: int, preallocated: int) -> None:
    entries = _offset_entries(count)
    data = _offset_index_bytes(entries, count + preallocated)
    index = OffsetIndex.from_bytes(data, BASE)
    assert len(index) == count
    assert index.is_preallocated == (preallocated > 0)
    assert list(index) == [OffsetPosition(BASE + rel, pos) for rel, pos in entries]
    index.validate()


@pytest.mark.parametrize("count", [0, 1, 5, 999])
def test_time_index_stops_at_the_zero_tail(count: int) -> None:
    entries = [(1_700_000_000_000 + 10 * i, 3 * i) for i in range(count)]
    index = TimeIndex.from_bytes(_time_index_bytes(entries, count + 873), BASE)
    assert len(index) == count
    assert list(index) == [TimestampOffset(ts, BASE + rel) for ts, rel in entries]
    index.validate()


def test_probing_a_preallocated_index_reads_only_a_few_entries() -> None:
    data = _offset_index_bytes(_offset_entries(300), 1_310_720)  # a 10 MiB preallocated .index
    reads = []

    def fetch(start: int, end: int) -> bytes:
        reads.append(end - start)
        return data[start:end]

    index = OffsetIndex(fetch, BASE, len(data))
    assert len(index) == 300
    assert len(reads) <= 25 and sum(reads) <= 25 * 8


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=300), st.integers(min_value=-10, max_value=6000))
def test_offset_lookup_is_the_floor_entry(count: int, relative_target: int) -> None:
    entries = _offset_entries(count)
    index = OffsetIndex.from_bytes(_offset_index_bytes(entries, count + 50), BASE)
    keys = [rel for rel, _ in entries]
    slot = bisect.bisect_right(keys, relative_target) - 1
    expected = (
        OffsetPosition(BASE, 0) if slot < 0 else OffsetPosition(BASE + entries[slot][0], entries[slot][1])
    )
    assert index.lookup(BASE + relative_target) == expected


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=300), st.integers(min_value=-5, max_value=4000))
def test_time_lookup_is_the_floor_entry(count: int, target: int) -> None:
    entries = [(10 * i + 1, 2 * i) for i in range(count)]
    index = TimeIndex.from_bytes(_time_index_bytes(entries, count + 10), BASE)
    slot = bisect.bisect_right([ts for ts, _ in entries], target) - 1
    expected = (
        TimestampOffset(-1, BASE) if slot < 0 else TimestampOffset(entries[slot][0], BASE + entries[slot][1])
    )
    assert index.lookup(target) == expected


def test_indexes_open_from_files_and_fetchers() -> None:
    data = _offset_index_bytes(_offset_entries(20), 40)
    from_file = OffsetIndex.open(io.BytesIO(data), BASE)
    from_fetcher = OffsetIndex.open(bytes_fetcher(data), BASE, size=len(data))
    assert list(from_file) == list(from_fetcher)
    assert from_file[-1] == from_file[19] and from_file[0].offset == BASE + 3
    with pytest.raises(IndexError):
        from_file[20]


def test_encoders_write_what_the_readers_read() -> None:
    offsets = [OffsetPosition(BASE + rel, pos) for rel, pos in _offset_entries(9)]
    assert encode_offset_index(offsets, BASE) == _offset_index_bytes(_offset_entries(9))
    times = [TimestampOffset(100 + i, BASE + i) for i in range(9)]
    assert list(TimeIndex.from_bytes(encode_time_index(times, BASE), BASE)) == times
    with pytest.raises(ValueError):
        encode_offset_index([OffsetPosition(BASE - 1, 10)], BASE)


def test_ragged_index_length_is_corruption() -> None:
    with pytest.raises(CorruptDataError):
        OffsetIndex.from_bytes(b"\x00" * 12, BASE, path="/x/00000000000000000000.index")


def test_validate_catches_entries_that_do_not_increase() -> None:
    entries = _offset_entries(5)
    entries[3] = (entries[1][0], entries[3][1])
    with pytest.raises(CorruptDataError, match="do not increase"):
        OffsetIndex.from_bytes(_offset_index_bytes(entries), BASE).validate()
    with pytest.raises(CorruptDataError, match="outside"):
        OffsetIndex.from_bytes(_offset_index_bytes(_offset_entries(5)), BASE).validate(log_size=10_000)
    with pytest.raises(CorruptDataError, match="do not increase"):
        TimeIndex.from_bytes(_time_index_bytes([(5, 1), (5, 2)]), BASE).validate()


def _txn_bytes(entries: list[tuple[int, int, int, int]], version: int = 0) -> bytes:
    return b"".join(struct.pack(">hqqqq", version, *entry) for entry in entries)


def test_txn_index_entries() -> None:
    raw = [(1000 + i, 10 * i, 10 * i + 5, 10 * i + 3) for i in range(3000)]
    entries = list(iter_txn_index(bytes_fetcher(_txn_bytes(raw))))
    assert [(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in entries] == raw
    assert encode_txn_index(entries) == _txn_bytes(raw)
    assert list(iter_txn_index(io.BytesIO(b""))) == []


def test_txn_index_damage_is_corruption() -> None:
    data = _txn_bytes([(1, 2, 3, 4), (5, 6, 7, 8)])
    with pytest.raises(CorruptDataError, match="partial"):
        list(iter_txn_index(bytes_fetcher(data[:-1])))
    with pytest.raises(CorruptDataError, match="version"):
        list(iter_txn_index(bytes_fetcher(_txn_bytes([(1, 2, 3, 4)], version=1))))
    assert AbortedTxn(1, 2, 3, 4).encode() == _txn_bytes([(1, 2, 3, 4)])
