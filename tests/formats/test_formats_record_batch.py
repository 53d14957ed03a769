"""Batch headers and segment iteration: fields, CRC failures naming the offset, and a partial tail
told apart from damage in the middle."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
from formats_builders import GZIP, LZ4, Rec, build_batch, compressible_value, control_batch, make_segment

from storage_core.errors import CorruptDataError
from storage_core.formats.codecs import Codec
from storage_core.formats.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    TimestampType,
    TruncatedTailError,
    iter_batch_headers,
    iter_batches,
    read_batch_at,
    validate_crc,
)
from storage_core.formats.source import ByteSource, bytes_fetcher


def test_header_fields_match_what_was_built() -> None:
    recs = [Rec(d, 5000 + d * 10, b"k", compressible_value(d)) for d in range(4)]
    batch = build_batch(
        recs,
        codec=LZ4,
        base_offset=123456789012,
        leader_epoch=9,
        producer_id=77,
        producer_epoch=2,
        base_sequence=40,
        transactional=True,
    )
    header = validate_crc(batch)
    assert header.base_offset == 123456789012
    assert header.size_in_bytes == len(batch)
    assert header.partition_leader_epoch == header.leader_epoch == 9
    assert header.magic == 2
    assert header.codec is Codec.LZ4
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.is_transactional and not header.is_control and not header.has_delete_horizon
    assert (
        header.last_offset_delta == 3
        and header.last_offset == 123456789015
        and header.next_offset == 123456789016
    )
    assert (header.base_timestamp, header.max_timestamp, header.first_record_timestamp) == (5000, 5030, 5000)
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.records_count) == (
        77,
        2,
        40,
        4,
    )
    assert BatchHeader.parse(header.encode()) == header
    assert header.encode() == batch[:HEADER_SIZE]


def test_log_append_time_and_control_bits() -> None:
    lat = BatchHeader.parse(build_batch([Rec(0, 1, b"k", b"v")], log_append_time=99))
    assert lat.timestamp_type is TimestampType.LOG_APPEND_TIME and lat.first_record_timestamp == 99
    marker = BatchHeader.parse(control_batch(commit=True, base_offset=1, producer_id=1, timestamp=3))
    assert marker.is_control and marker.is_transactional


def test_no_leader_epoch_reads_as_none() -> None:
    header = BatchHeader.parse(build_batch([Rec(0, 1, b"k", b"v")], leader_epoch=-1))
    assert header.leader_epoch is None


def test_headers_stream_from_a_file_and_a_fetcher(tmp_path: Path) -> None:
    segment, layout = make_segment()
    path = tmp_path / "00000000000000001000.log"
    path.write_bytes(segment)
    with open(path, "rb") as f:
        from_file = list(iter_batch_headers(f))
    from_fetcher = list(iter_batch_headers(bytes_fetcher(segment)))
    assert from_file == from_fetcher
    assert [(pos, h.base_offset, h.records_count) for pos, h in from_file] == layout


def test_headers_are_read_without_fetching_bodies() -> None:
    segment, layout = make_segment()
    fetched: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        fetched.append((start, end))
        return segment[start:end]

    headers = list(iter_batch_headers(fetch, size=len(segment)))
    assert len(headers) == len(layout)
    assert sum(end - start for start, end in fetched) == HEADER_SIZE * len(layout)


def test_start_position_skips_earlier_batches() -> None:
    segment, layout = make_segment()
    position = layout[10][0]
    assert [p for p, _ in iter_batch_headers(bytes_fetcher(segment), position)] == [
        p for p, _, _ in layout[10:]
    ]
    assert [b.position for b in iter_batches(bytes_fetcher(segment), position)] == [
        p for p, _, _ in layout[10:]
    ]


@pytest.mark.parametrize("chunk_size", [1, 100, 4096, 1 << 20])
def test_iter_batches_yields_whole_validated_batches(chunk_size: int) -> None:
    segment, layout = make_segment()
    batches = list(iter_batches(io.BytesIO(segment), chunk_size=chunk_size))
    assert [(b.position, b.header.base_offset) for b in batches] == [(p, o) for p, o, _ in layout]
    assert b"".join(b.data for b in batches) == segment


def test_read_batch_at_a_position() -> None:
    segment, layout = make_segment()
    position, offset, count = layout[7]
    batch = read_batch_at(bytes_fetcher(segment), position)
    assert batch.header.base_offset == offset and batch.header.records_count == count
    assert batch.end_position == layout[8][0]


@pytest.mark.parametrize("cut", [1, 10, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 5, -1])
def test_partial_last_batch_is_a_truncated_tail(cut: int, tmp_path: Path) -> None:
    segment, layout = make_segment()
    last_position, last_offset, _ = layout[-1]
    end = len(segment) + cut if cut < 0 else last_position + cut
    damaged = segment[:end]
    sources: list[tuple[str, ByteSource, int | None]] = [
        ("fetcher", bytes_fetcher(damaged), None),
        ("sized-fetcher", bytes_fetcher(damaged), len(damaged)),
        ("file", io.BytesIO(damaged), None),
    ]
    for name, source, size in sources:
        seen = []
        with pytest.raises(TruncatedTailError) as err:
            for position, _ in iter_batch_headers(source, size=size):
                seen.append(position)
        assert seen == [p for p, _, _ in layout[:-1]], name
        assert err.value.position == last_position
        if cut >= 8:
            assert err.value.offset == last_offset
    with pytest.raises(TruncatedTailError):
        list(iter_batches(bytes_fetcher(damaged)))


def test_flipped_byte_in_the_middle_is_corruption_naming_offset_and_file() -> None:
    segment, layout = make_segment()
    position, offset, _ = layout[12]
    damaged = bytearray(segment)
    damaged[position + HEADER_SIZE + 3] ^= 0x40
    with pytest.raises(CorruptDataError) as err:
        list(iter_batches(bytes_fetcher(bytes(damaged)), path="/kafka/t-0/00000000000000001000.log"))
    assert not isinstance(err.value, TruncatedTailError)
    assert err.value.offset == offset
    assert err.value.path == "/kafka/t-0/00000000000000001000.log"
    assert f"offset={offset}" in str(err.value) and "CRC" in str(err.value)


def test_leader_epoch_is_outside_the_crc() -> None:
    batch = bytearray(build_batch([Rec(0, 1, b"k", compressible_value(0))], codec=GZIP))
    struct.pack_into(">i", batch, 12, 12345)
    assert validate_crc(bytes(batch)).leader_epoch == 12345


@pytest.mark.parametrize(
    ("field_offset", "fmt", "value", "message"),
    [(16, ">b", 1, "magic"), (8, ">i", 10, "length"), (21, ">h", 7, "codec"), (57, ">i", -1, "negative")],
)
def test_malformed_headers_are_corruption(field_offset: int, fmt: str, value: int, message: str) -> None:
    segment, layout = make_segment(5)
    position, offset, _ = layout[2]
    damaged = bytearray(segment)
    struct.pack_into(fmt, damaged, position + field_offset, value)
    with pytest.raises(CorruptDataError, match=message) as err:
        list(iter_batch_headers(bytes_fetcher(bytes(damaged))))
    assert err.value.offset == offset


def test_batch_bytes_of_the_wrong_length_are_rejected() -> None:
    batch = build_batch([Rec(0, 1, b"k", b"v")])
    with pytest.raises(CorruptDataError, match="declares"):
        validate_crc(batch + b"\x00")
