"""Records decode field by field as an independent encoder (kafka-python) wrote them, for every codec,
headers, null keys and values, transactional and control batches and LogAppendTime."""

from __future__ import annotations

import struct

import pytest
from formats_builders import (
    ALL_CODECS,
    NONE,
    ZSTD,
    Rec,
    build_batch,
    compressible_value,
    control_batch,
    kafka_python_records,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_core.errors import CorruptDataError
from storage_core.formats.codecs import Codec
from storage_core.formats.record_batch import BatchHeader, TimestampType
from storage_core.formats.records import ControlType, decode_records, iter_records


def _mixed_records(count: int) -> list[Rec]:
    recs = []
    for i in range(count):
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 5 else compressible_value(i)
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 1:
            headers = (("trace-id", f"t{i}".encode()), ("empty", b""), ("null", None), ("ünïcode", b"\xff"))
        # Timestamps deliberately go backwards sometimes: CreateTime does not have to be monotonic.
        recs.append(Rec(i, 1_700_000_000_000 + (i * 37) % 1000 - 500, key, value, headers))
    return recs


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_every_codec_decodes_to_what_was_written(codec: int) -> None:
    written = _mixed_records(500)
    batch = build_batch(written, codec=codec, base_offset=1_000_000, leader_epoch=7)
    records = decode_records(batch)
    assert BatchHeader.parse(batch).codec == Codec(codec)
    assert len(records) == len(written)
    for rec, got in zip(written, records, strict=True):
        assert got.offset == 1_000_000 + rec.offset_delta
        assert got.timestamp == rec.timestamp
        assert got.timestamp_type is TimestampType.CREATE_TIME
        assert got.key == rec.key
        assert got.value == rec.value
        assert got.headers == rec.headers
        assert got.leader_epoch == 7
        assert (got.is_transactional, got.is_control, got.control_type) == (False, False, None)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_agrees_with_kafka_python_decoder(codec: int) -> None:
    batch = build_batch(_mixed_records(200), codec=codec, base_offset=42)
    ours = [
        (r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, list(r.headers))
        for r in decode_records(batch)
    ]
    assert ours == kafka_python_records(batch)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_log_append_time_gives_every_record_the_batch_max_timestamp(codec: int) -> None:
    written = _mixed_records(50)
    batch = build_batch(written, codec=codec, log_append_time=1_800_000_000_123)
    records = decode_records(batch)
    assert {r.timestamp for r in records} == {1_800_000_000_123}
    assert {r.timestamp_type for r in records} == {TimestampType.LOG_APPEND_TIME}
    assert [r.value for r in records] == [rec.value for rec in written]
    assert [(r.offset, r.timestamp, int(r.timestamp_type)) for r in records] == [
        (o, t, tt) for o, t, tt, *_ in kafka_python_records(batch)
    ]


def test_transactional_batch_carries_producer_identity() -> None:
    batch = build_batch(
        _mixed_records(10),
        codec=ZSTD,
        producer_id=4711,
        producer_epoch=3,
        base_sequence=0,
        transactional=True,
    )
    header = BatchHeader.parse(batch)
    assert header.is_transactional and not header.is_control
    records = decode_records(batch)
    assert {(r.producer_id, r.producer_epoch, r.is_transactional) for r in records} == {(4711, 3, True)}


@pytest.mark.parametrize("commit", [True, False])
def test_control_batches_decode_their_marker_type(commit: bool) -> None:
    batch = control_batch(
        commit=commit, base_offset=99, producer_id=12, producer_epoch=1, timestamp=5, coordinator_epoch=8
    )
    (record,) = decode_records(batch)
    assert record.is_control and record.is_transactional
    assert record.control_type is (ControlType.COMMIT if commit else ControlType.ABORT)
    assert record.offset == 99
    assert record.value == struct.pack(">hi", 0, 8)


def test_unknown_control_type_is_kept_as_a_number() -> None:
    key = struct.pack(">hh", 0, 3)
    batch = build_batch(
        [Rec(0, 1, key, b"")], transactional=True, control=True, producer_id=1, producer_epoch=0
    )
    (record,) = decode_records(batch)
    assert record.control_type == 3 and not isinstance(record.control_type, ControlType)


def test_control_record_without_a_valid_key_is_corrupt() -> None:
    batch = build_batch(
        [Rec(0, 1, b"\x00", b"")], transactional=True, control=True, producer_id=1, producer_epoch=0
    )
    with pytest.raises(CorruptDataError):
        decode_records(batch)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_small_decompression_chunks_give_the_same_records(codec: int) -> None:
    batch = build_batch(_mixed_records(300), codec=codec)
    assert list(iter_records(batch, chunk_size=7)) == decode_records(batch)


def test_large_records_span_many_chunks() -> None:
    written = [Rec(i, 1000 + i, b"k", compressible_value(i, 200_000)) for i in range(5)]
    batch = build_batch(written, codec=ZSTD)
    assert [r.value for r in iter_records(batch, chunk_size=1024)] == [rec.value for rec in written]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=40)),
            st.one_of(st.none(), st.binary(max_size=200)),
            st.lists(
                st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=10))), max_size=3
            ),
            st.integers(min_value=0, max_value=10**6),
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(ALL_CODECS),
    st.integers(min_value=0, max_value=2**40),
)
def test_arbitrary_records_round_trip(
    contents: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    codec: int,
    base: int,
) -> None:
    written = [Rec(i, ts, key, value, tuple(headers)) for i, (key, value, headers, ts) in enumerate(contents)]
    try:
        batch = build_batch(written, codec=codec, base_offset=base)
    except AssertionError:
        batch = build_batch(written, codec=NONE, base_offset=base)  # data too small to compress
    got = decode_records(batch)
    assert [(r.offset - base, r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (w.offset_delta, w.timestamp, w.key, w.value, w.headers) for w in written
    ]


def _with_bad_record_count(batch: bytes, count: int) -> bytes:
    from kafka.record.util import calc_crc32c

    buf = bytearray(batch)
    struct.pack_into(">i", buf, 57, count)
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    return bytes(buf)


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("delta", [-1, 1])
def test_record_count_mismatch_is_corruption_naming_the_offset(codec: int, delta: int) -> None:
    batch = build_batch(_mixed_records(20), codec=codec, base_offset=5000)
    bad = _with_bad_record_count(batch, 20 + delta)
    with pytest.raises(CorruptDataError) as err:
        decode_records(bad, path="/data/t-0/00000000000000005000.log")
    assert err.value.offset == 5000
    assert "00000000000000005000.log" in str(err.value)


def test_crc_is_checked_before_decoding() -> None:
    batch = bytearray(build_batch(_mixed_records(20), base_offset=77))
    batch[200] ^= 0x01
    with pytest.raises(CorruptDataError, match="CRC") as err:
        decode_records(bytes(batch))
    assert err.value.offset == 77


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL_CODECS), st.data())
def test_damaged_payloads_only_ever_raise_corrupt_data_error(codec: int, data: st.DataObject) -> None:
    """Bytes that pass the CRC but are wrong inside (a buggy writer) must still fail cleanly."""
    from kafka.record.util import calc_crc32c

    written = _mixed_records(15)
    batch = bytearray(build_batch(written, codec=codec))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(61, len(batch) - 1))
        batch[index] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", batch, 17, calc_crc32c(bytes(batch[21:])))
    try:
        records = decode_records(bytes(batch))
    except CorruptDataError as err:
        assert err.offset == 0
    else:
        assert len(records) == len(written)


def _with_payload(batch: bytes, payload: bytes) -> bytes:
    """``batch`` (one record, uncompressed) with its records replaced by ``payload``, length and CRC fixed."""
    from kafka.record.util import calc_crc32c

    buf = bytearray(batch[:61] + payload)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    return bytes(buf)


@pytest.mark.parametrize(
    "payload",
    [
        bytes([4, 0, 0x81]),  # the timestamp delta's first byte asks for a second one past the end
        bytes([6, 0, 0, 0, 0x01, 0x81]),  # so does the value length, after a null key
        bytes([2, 0]),  # the record ends before its timestamp delta
    ],
)
def test_a_record_cut_inside_a_field_is_corruption_naming_the_batch(payload: bytes) -> None:
    batch = _with_payload(build_batch([Rec(0, 1_700_000_000_000, b"k", b"v", ())], base_offset=900), payload)
    with pytest.raises(CorruptDataError, match="malformed record batch") as err:
        decode_records(batch)
    assert err.value.offset == 900
