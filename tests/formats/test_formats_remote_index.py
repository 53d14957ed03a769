"""The remote index formats: exact byte layout, round trips, damage refused, and lookups that agree with
a brute-force search over the batches they index."""

from __future__ import annotations

import bisect
import struct

import crc32c
import pytest
from formats_builders import make_segment
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_core.errors import CorruptDataError
from storage_core.formats.record_batch import BatchHeader, iter_batch_headers
from storage_core.formats.remote_index import (
    FIXED_ENTRY_SIZE,
    RemoteDataId,
    RemoteIndexBuilder,
    RemoteLogIndexEntry,
    RemotePointerIndex,
    build_remote_indexes,
    iter_remote_log_index,
    position_for_offset,
    position_for_timestamp,
    read_remote_log_entry,
    rebuild_pointer_indexes,
)
from storage_core.formats.source import bytes_fetcher

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ENTRIES = st.builds(
    lambda first, span, ts1, ts2, length, rdi: RemoteLogIndexEntry(
        first, first + span, ts1, ts2, length, rdi
    ),
    st.integers(0, 2**62),
    st.integers(0, 2**20),
    I64,
    I64,
    st.integers(0, 2**31 - 1),
    st.binary(max_size=300),
)


def test_entry_layout_matches_the_seed_format() -> None:
    rdi = RemoteDataId("00000000000000001000-6f1d.log", 4096).encode()
    entry = RemoteLogIndexEntry(1000, 1999, 1_700_000_000_000, 1_700_000_009_999, 1_048_000, rdi)
    data = entry.encode()
    magic, length, crc = struct.unpack_from(">hhi", data)
    first, last, first_ts, last_ts, data_length, rdi_length = struct.unpack_from(">qqqqih", data, 8)
    assert (magic, length) == (0, len(data)) and len(data) == 46 + len(rdi) == FIXED_ENTRY_SIZE + len(rdi)
    assert (first, last, first_ts, last_ts) == (1000, 1999, 1_700_000_000_000, 1_700_000_009_999)
    assert data_length == 1_048_000
    assert data[46:] == rdi and rdi_length == len(rdi) and rdi == b"00000000000000001000-6f1d.log@4096"
    assert crc & 0xFFFFFFFF == crc32c.crc32c(data[8:])
    assert RemoteLogIndexEntry.decode(data) == entry


@given(st.lists(ENTRIES, max_size=20), st.binary(max_size=10))
def test_entries_round_trip_in_a_file(entries: list[RemoteLogIndexEntry], prefix: bytes) -> None:
    data = prefix + b"".join(e.encode() for e in entries)
    decoded = list(iter_remote_log_index(bytes_fetcher(data), len(prefix)))
    assert [e for _, e in decoded] == entries
    for position, entry in decoded:
        assert read_remote_log_entry(bytes_fetcher(data), position) == entry


@settings(max_examples=200)
@given(ENTRIES, st.data())
def test_any_flipped_bit_is_refused(entry: RemoteLogIndexEntry, data: st.DataObject) -> None:
    raw = bytearray(entry.encode())
    bit = data.draw(st.integers(0, len(raw) * 8 - 1))
    raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CorruptDataError):
        RemoteLogIndexEntry.decode(bytes(raw), path="/cache/t-0/00000000000000000000.remoteLogIndex")


def test_bad_magic_and_lengths_are_named() -> None:
    raw = bytearray(RemoteLogIndexEntry(5, 6, 1, 2, 100, b"obj@0").encode())
    bad_magic = bytearray(raw)
    struct.pack_into(">h", bad_magic, 0, 1)
    with pytest.raises(CorruptDataError, match="magic"):
        RemoteLogIndexEntry.decode(bytes(bad_magic))
    with pytest.raises(CorruptDataError, match="CRC") as err:
        bad_crc = bytearray(raw)
        bad_crc[20] ^= 0x10
        RemoteLogIndexEntry.decode(bytes(bad_crc))
    assert err.value.offset is not None
    with pytest.raises(CorruptDataError):
        list(iter_remote_log_index(bytes_fetcher(bytes(raw[:-1]))))


def test_oversized_rdi_cannot_be_written() -> None:
    with pytest.raises(ValueError):
        RemoteLogIndexEntry(0, 0, 0, 0, 0, b"x" * (32767 - 45)).encode()
    assert len(RemoteLogIndexEntry(0, 0, 0, 0, 0, b"x" * (32767 - 46)).encode()) == 32767


@given(st.text(min_size=0, max_size=60), st.integers(0, 2**40))
def test_remote_data_ids_round_trip(name: str, position: int) -> None:
    assert RemoteDataId.decode(RemoteDataId(name, position).encode()) == RemoteDataId(name, position)


@pytest.mark.parametrize("raw", [b"no-position", b"obj@", b"obj@-1", b"obj@1x", b"\xff@1"])
def test_bad_remote_data_ids(raw: bytes) -> None:
    with pytest.raises(ValueError):
        RemoteDataId.decode(raw)
    entry = RemoteLogIndexEntry(700, 709, 0, 0, 10, raw)
    # Read from an index, a foreign rdi is damage: the project's error, naming the object and offset.
    with pytest.raises(CorruptDataError, match=r"offset=700, file=seg\.remoteLogIndex"):
        entry.locate("seg.remoteLogIndex")
    with pytest.raises(CorruptDataError, match="offset=700"):
        _ = entry.data_id


SEGMENT, LAYOUT = make_segment(60, first_offset=500)
HEADERS = list(iter_batch_headers(bytes_fetcher(SEGMENT)))


@pytest.mark.parametrize("target", [1, 500, 2000, 10_000, 1 << 20])
def test_builder_groups_contiguous_batches_near_the_target_size(target: int) -> None:
    files = build_remote_indexes(HEADERS, "seg.log", target_entry_bytes=target)
    entries = list(iter_remote_log_index(bytes_fetcher(files.log_index)))
    covered = []
    for _, entry in entries:
        data_id = entry.data_id
        assert data_id.object_name == "seg.log"
        group = [(p, h) for p, h in HEADERS if data_id.position <= p < data_id.position + entry.data_length]
        assert sum(h.size_in_bytes for _, h in group) == entry.data_length
        assert entry.data_length <= target or len(group) == 1
        assert entry.first_offset == group[0][1].base_offset and entry.last_offset == group[-1][1].last_offset
        assert entry.last_timestamp == max(h.max_timestamp for _, h in group)
        assert entry.first_timestamp == group[0][1].base_timestamp
        covered.extend(p for p, _ in group)
    assert covered == [p for p, _ in HEADERS]
    offsets = RemotePointerIndex.from_bytes(files.offset_index)
    assert [(p.key, p.position) for p in offsets] == [(e.first_offset, pos) for pos, e in entries]
    offsets.validate()
    RemotePointerIndex.from_bytes(files.time_index).validate()


def _entry_holding(entries: list[tuple[int, RemoteLogIndexEntry]], offset: int) -> int:
    firsts = [e.first_offset for _, e in entries]
    return entries[max(0, bisect.bisect_right(firsts, offset) - 1)][0]


def test_offset_lookups_find_the_entry_holding_each_offset() -> None:
    files = build_remote_indexes(HEADERS, "seg.log", target_entry_bytes=3000)
    entries = list(iter_remote_log_index(bytes_fetcher(files.log_index)))
    offsets = RemotePointerIndex.from_bytes(files.offset_index)
    for _, header in HEADERS:
        for offset in (header.base_offset, header.last_offset):
            position = position_for_offset(offsets, offset)
            assert position == _entry_holding(entries, offset)
            entry = read_remote_log_entry(bytes_fetcher(files.log_index), position)
            assert entry.first_offset <= offset <= entry.last_offset
    assert position_for_offset(offsets, 0) == entries[0][0]
    assert position_for_offset(RemotePointerIndex.from_bytes(b""), 5) is None


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), min_size=1, max_size=40),
    st.integers(1, 5),
    st.integers(-10, 10_010),
)
def test_time_lookup_finds_the_first_entry_that_can_hold_the_timestamp(
    max_timestamps: list[int], per_entry: int, target: int
) -> None:
    """Batches with arbitrary (non-monotonic) max timestamps; the answer must be the first entry whose
    last timestamp reaches the target, computed here by a linear scan."""
    from formats_builders import Rec, build_batch

    headers = []
    position = 0
    for i, ts in enumerate(max_timestamps):
        batch = build_batch([Rec(0, ts, b"k", b"v")], base_offset=i)
        headers.append((position, BatchHeader.parse(batch)))
        position += len(batch)
    size = len(build_batch([Rec(0, 0, b"k", b"v")])) + 8
    files = build_remote_indexes(headers, "o", target_entry_bytes=size * per_entry)
    entries = list(iter_remote_log_index(bytes_fetcher(files.log_index)))
    expected = next((pos for pos, e in entries if e.last_timestamp >= target), None)
    assert position_for_timestamp(RemotePointerIndex.from_bytes(files.time_index), target) == expected


def test_pointer_indexes_rebuild_from_the_log_index_alone() -> None:
    files = build_remote_indexes(HEADERS, "seg.log", target_entry_bytes=2500)
    assert rebuild_pointer_indexes(bytes_fetcher(files.log_index)) == files


def test_builder_spans_objects_and_appends_to_an_existing_index() -> None:
    half = len(HEADERS) // 2
    first = build_remote_indexes(HEADERS[:half], "a.log", target_entry_bytes=4000)
    last_entry = list(iter_remote_log_index(bytes_fetcher(first.log_index)))[-1][1]
    builder = RemoteIndexBuilder(
        target_entry_bytes=4000,
        start_position=len(first.log_index),
        max_timestamp_so_far=max(h.max_timestamp for _, h in HEADERS[:half]),
        last_offset_so_far=last_entry.last_offset,
    )
    base = HEADERS[half][0]
    for position, header in HEADERS[half:]:
        builder.add_batch("b.log", position - base, header)
    second = builder.finish()
    log_index = first.log_index + second.log_index
    entries = list(iter_remote_log_index(bytes_fetcher(log_index)))
    assert {e.data_id.object_name for _, e in entries} == {"a.log", "b.log"}
    pointers = RemotePointerIndex.from_bytes(first.offset_index + second.offset_index)
    pointers.validate()
    assert [p.position for p in pointers] == [pos for pos, _ in entries]
    with pytest.raises(ValueError):
        builder.add_batch("b.log", 0, HEADERS[0][1])


def test_ragged_pointer_index_is_corruption() -> None:
    with pytest.raises(CorruptDataError):
        RemotePointerIndex.from_bytes(b"\x00" * 13)
