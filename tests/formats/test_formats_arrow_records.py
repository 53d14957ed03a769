"""The Arrow decoder equals the record decoder (records.py), record for record, on batches written by an
independent encoder (kafka-python): every codec, headers (non-ASCII and malformed keys included), null
keys and values, LogAppendTime, control batches, offset windows, and damaged payloads."""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest
from formats_builders import ALL_CODECS, NONE, ZSTD, Rec, build_batch, compressible_value, control_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_core.errors import CorruptDataError
from storage_core.formats.arrow_records import decode_arrow, kafka_schema
from storage_core.formats.record_batch import RawBatch, iter_batches, validate_crc
from storage_core.formats.records import iter_records
from storage_core.formats.source import bytes_fetcher

Row = tuple[Any, ...]


def _batches(segment: bytes) -> list[RawBatch]:
    return list(iter_batches(bytes_fetcher(segment)))


def _expected(batches: list[RawBatch], lo: int | None = None, hi: int | None = None) -> list[Row]:
    rows = []
    for batch in batches:
        for r in iter_records(batch):
            if r.is_control or (lo is not None and r.offset < lo) or (hi is not None and r.offset >= hi):
                continue
            headers = [{"key": k, "value": v} for k, v in r.headers] or None
            rows.append((r.key, r.value, r.offset, r.timestamp, int(r.timestamp_type), headers))
    return rows


def _timestamps_ms(batch: Any) -> list[int]:
    return [v // 1000 for v in batch.column("timestamp").cast("int64").to_pylist()]


def _rows(batch: Any) -> list[Row]:
    cols = batch.to_pydict()
    return list(
        zip(
            cols["key"],
            cols["value"],
            cols["offset"],
            _timestamps_ms(batch),
            cols["timestampType"],
            cols["headers"],
        )
    )


records_strategy = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), st.binary(max_size=200)),
        st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=10))), max_size=3),
        st.integers(min_value=0, max_value=10**6),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(records_strategy, st.sampled_from(ALL_CODECS), st.booleans(), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    st.data(),
)
def test_many_batches_decode_like_the_record_decoder(
    specs: list[tuple[list[tuple[Any, Any, Any, int]], int, bool, bool]], data: st.DataObject
) -> None:
    parts = []
    offset = data.draw(st.integers(0, 2**40))
    for contents, codec, log_append, marker_after in specs:
        written = [Rec(i, 1_600_000_000_000 + ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(contents)]
        append_time = 1_650_000_000_123 if log_append else None
        try:
            parts.append(build_batch(written, codec=codec, base_offset=offset, log_append_time=append_time))
        except AssertionError:  # too small to compress
            parts.append(build_batch(written, codec=NONE, base_offset=offset, log_append_time=append_time))
        offset += len(written)
        if marker_after:
            parts.append(
                control_batch(
                    commit=data.draw(st.booleans()),
                    base_offset=offset,
                    producer_id=7,
                    timestamp=1_600_000_000_000,
                )
            )
            offset += 1
    batches = _batches(b"".join(parts))
    first = batches[0].header.base_offset
    lo = data.draw(st.one_of(st.none(), st.integers(first, offset)))
    hi = data.draw(st.one_of(st.none(), st.integers(first, offset + 1)))
    got = decode_arrow(batches, "orders", 5, include_headers=True, min_offset=lo, end_offset=hi)
    assert got.schema == kafka_schema(True)
    assert _rows(got) == _expected(batches, lo, hi)
    assert set(got.column("topic").to_pylist()) <= {"orders"}
    assert set(got.column("partition").to_pylist()) <= {5}


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_without_headers_the_schema_is_the_kafka_source_default(codec: int) -> None:
    recs = [
        Rec(i, 1_700_000_000_000 + i, f"k{i}".encode(), compressible_value(i), (("h", b"v"),))
        for i in range(60)
    ]
    batches = _batches(build_batch(recs, codec=codec, base_offset=40))
    got = decode_arrow(batches, "t", 0)
    assert got.schema == kafka_schema(False)
    assert [r[:5] for r in _rows(got.append_column("headers", got.column("key")))] == [
        r[:5] for r in _expected(batches)
    ]


def test_header_keys_that_are_not_utf8_decode_leniently_like_java() -> None:
    batch = build_batch([Rec(0, 1, b"k", b"v", (("ok", b"1"),))], base_offset=0)
    # Patch the header key "ok" to two bytes that are not UTF-8, then fix the CRC.
    from kafka.record.util import calc_crc32c

    buf = bytearray(batch)
    at = bytes(buf).index(b"ok")
    buf[at : at + 2] = b"\xff\xfe"
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    batches = _batches(bytes(buf))
    got = decode_arrow(batches, "t", 0, include_headers=True)
    assert got.column("headers").to_pylist() == [[{"key": "\ufffd\ufffd", "value": b"1"}]]
    assert _rows(got) == _expected(batches)


def test_an_empty_group_gives_an_empty_batch_with_the_schema() -> None:
    got = decode_arrow([], "t", 0, include_headers=True)
    assert got.num_rows == 0 and got.schema == kafka_schema(True)


def _mixed(count: int) -> list[Rec]:
    return [
        Rec(
            i,
            1_700_000_000_000 + i,
            None if i % 7 == 0 else f"key-{i}".encode(),
            compressible_value(i),
            (("trace", f"t{i}".encode()), ("null", None)) if i % 3 == 1 else (),
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("delta", [-1, 1])
def test_record_count_mismatch_is_corruption_naming_the_batch(codec: int, delta: int) -> None:
    from kafka.record.util import calc_crc32c

    buf = bytearray(build_batch(_mixed(20), codec=codec, base_offset=5000))
    struct.pack_into(">i", buf, 57, 20 + delta)
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    good = build_batch(_mixed(5), codec=codec, base_offset=4000)
    batches = _batches(good + bytes(buf))
    with pytest.raises(CorruptDataError) as err:
        decode_arrow(batches, "t", 0, path="/tier/t-0/5000.log")
    assert err.value.offset == 5000
    assert "5000.log" in str(err.value)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL_CODECS), st.data())
def test_damaged_payloads_fail_exactly_when_the_record_decoder_fails(codec: int, data: st.DataObject) -> None:
    """Bytes that pass the CRC but are wrong inside (a buggy writer): same verdict, same batch named."""
    from kafka.record.util import calc_crc32c

    batch = bytearray(build_batch(_mixed(15), codec=codec, base_offset=300))
    for _ in range(data.draw(st.integers(1, 4))):
        batch[data.draw(st.integers(61, len(batch) - 1))] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", batch, 17, calc_crc32c(bytes(batch[21:])))
    batches = _batches(bytes(batch))
    try:
        expected = _expected(batches)
    except CorruptDataError as err:
        with pytest.raises(CorruptDataError) as got_err:
            decode_arrow(batches, "t", 0, include_headers=True)
        assert got_err.value.offset == err.offset == 300
    else:
        assert _rows(decode_arrow(batches, "t", 0, include_headers=True)) == expected


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(records_strategy, st.sampled_from(ALL_CODECS)), min_size=1, max_size=5),
    st.data(),
)
def test_zero_copy_views_hold_the_same_bytes_as_the_copied_columns(
    specs: list[tuple[list[tuple[Any, Any, Any, int]], int]], data: st.DataObject
) -> None:
    parts = []
    offset = 0
    for contents, codec in specs:
        written = [Rec(i, 1_600_000_000_000 + ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(contents)]
        try:
            parts.append(build_batch(written, codec=codec, base_offset=offset))
        except AssertionError:  # too small to compress
            parts.append(build_batch(written, codec=NONE, base_offset=offset))
        offset += len(written)
    batches = _batches(b"".join(parts))
    lo = data.draw(st.one_of(st.none(), st.integers(0, offset)))
    copied = decode_arrow(batches, "t", 1, include_headers=True, min_offset=lo)
    viewed = decode_arrow(batches, "t", 1, include_headers=True, min_offset=lo, zero_copy=True)
    assert viewed.schema == kafka_schema(True, zero_copy=True)
    assert viewed.schema.field("value").type == pa.binary_view()
    viewed.validate(full=True)
    for name in copied.schema.names:
        column = viewed.column(name)
        if name in ("key", "value"):
            column = column.cast(pa.binary())
        assert column.equals(copied.column(name)), name


def test_zero_copy_views_point_into_a_mapped_object(tmp_path: Any) -> None:
    """Values longer than 12 bytes are not copied: the view column's data buffer is the mapping."""
    from storage_core.formats.mapped import MappedFile

    recs = [Rec(i, 1_700_000_000_000 + i, f"k{i}".encode(), compressible_value(i, 40 + i)) for i in range(50)]
    path = tmp_path / "segment.log"
    path.write_bytes(build_batch(recs[:20], base_offset=0) + build_batch(recs[20:], base_offset=20))
    with path.open("rb") as f:
        mapped = MappedFile(f)
    batches = list(iter_batches(mapped))
    viewed = decode_arrow(batches, "t", 0, zero_copy=True)
    values = viewed.column("value")
    assert values.cast(pa.binary()).to_pylist() == [r.value for r in recs]
    assert values.buffers()[2].size == mapped.size, "the data buffer is the mapped object, not a copy"


def _segment_file(tmp_path: Any, codec: int) -> tuple[Any, list[Rec]]:
    recs = [Rec(i, 1_700_000_000_000 + i, f"k{i}".encode(), compressible_value(i, 300)) for i in range(80)]
    path = tmp_path / "segment.log"
    path.write_bytes(
        b"".join(build_batch(recs[i : i + 20], base_offset=i, codec=codec) for i in range(0, 80, 20))
    )
    return path, recs


def _stored_batches(path: Any, mapped: bool) -> list[RawBatch]:
    from storage_core.formats.mapped import MappedFile

    if not mapped:
        return list(iter_batches(bytes_fetcher(path.read_bytes()), path="obj", verify_crc=False))
    with path.open("rb") as f:
        return list(iter_batches(MappedFile(f), path="obj", verify_crc=False))


@pytest.mark.parametrize("mapped", [True, False], ids=["mapped object", "fetched bytes"])
@pytest.mark.parametrize("codec", [NONE, ZSTD], ids=["uncompressed", "zstd"])
@pytest.mark.parametrize("zero_copy", [False, True])
@pytest.mark.parametrize("instruction", [True, False], ids=["crc instruction", "no crc instruction"])
def test_verify_crc_refuses_a_damaged_batch_with_the_readers_error(
    tmp_path: Any, mapped: bool, codec: int, zero_copy: bool, instruction: bool, monkeypatch: Any
) -> None:
    """With ``verify_crc`` the decoder checks every batch (in its record walk for an uncompressed mapped
    object where the compiled loops have the CRC instruction, before decompressing or copying otherwise)
    and names a damaged one exactly as the reader's check does; whole data decodes as without the
    check."""
    from storage_core.formats import crc_kernel

    if instruction and not crc_kernel.HARDWARE:
        pytest.fail("this machine's numba target has no CRC instruction: the compiled check is untested")
    monkeypatch.setattr(crc_kernel, "HARDWARE", instruction)
    path, recs = _segment_file(tmp_path, codec)
    whole = decode_arrow(_stored_batches(path, mapped), "t", 0, verify_crc=True, zero_copy=zero_copy)
    assert whole.column("value").cast(pa.binary()).to_pylist() == [r.value for r in recs]
    victim = _stored_batches(path, False)[2]
    data = bytearray(path.read_bytes())
    data[victim.position + victim.header.size_in_bytes - 5] ^= 0x01  # in the last record, CRC-covered
    path.write_bytes(bytes(data))
    batches = _stored_batches(path, mapped)
    with pytest.raises(CorruptDataError) as reader_error:
        validate_crc(batches[2].data, path="obj", position=batches[2].position)
    with pytest.raises(CorruptDataError) as err:
        decode_arrow(batches, "t", 0, verify_crc=True, zero_copy=zero_copy)
    assert str(err.value) == str(reader_error.value)
    assert err.value.offset == 40
    if codec == NONE:  # the flipped bit sits in a value, which parses: only the CRC tells
        unchecked = decode_arrow(batches, "t", 0, zero_copy=zero_copy)
        assert unchecked.column("value").cast(pa.binary()).to_pylist() != [r.value for r in recs]


def test_verify_crc_checks_a_control_batch_handed_in(tmp_path: Any) -> None:
    """Control batches hold no data but are checked like any other batch handed to the decoder."""
    from storage_core.formats.mapped import MappedFile

    recs = [Rec(i, 1_700_000_000_000 + i, b"k", b"v" * 30) for i in range(5)]
    marker = control_batch(commit=True, base_offset=5, producer_id=7, timestamp=1)
    data = bytearray(build_batch(recs, base_offset=0) + marker)
    data[-3] ^= 0x10
    path = tmp_path / "segment.log"
    path.write_bytes(bytes(data))
    with path.open("rb") as f:
        batches = list(iter_batches(MappedFile(f), path="obj", verify_crc=False))
    assert len(decode_arrow(batches, "t", 0)) == 5
    with pytest.raises(CorruptDataError, match="CRC mismatch") as err:
        decode_arrow(batches, "t", 0, verify_crc=True)
    assert err.value.offset == 5


def test_a_batch_left_out_below_the_start_is_still_checked_when_the_decoder_checks() -> None:
    """With the decoder checking CRCs (``CrcChecks.DECODER``), batches handed to ``arrow_batches`` come
    unchecked; one it leaves out because its header puts it below ``min_offset`` is checked there, as a
    damaged header must not drop data silently."""
    from storage_core.formats.checked_batches import CrcChecks
    from storage_core.remote.arrow_read import arrow_batches

    recs = [Rec(i, 1_700_000_000_000 + i, b"k", b"v" * 50) for i in range(30)]
    data = bytearray(b"".join(build_batch(recs[i : i + 10], base_offset=i) for i in range(0, 30, 10)))
    data[70] ^= 0x01  # in the first batch (offsets 0-9), CRC-covered
    batches = list(iter_batches(bytes_fetcher(bytes(data)), path="obj", verify_crc=False))
    undamaged = list(arrow_batches(batches, CrcChecks.INLINE, "t", 0, min_offset=10))
    assert sum(b.num_rows for b in undamaged) == 20  # without the check, the damage goes unseen
    with pytest.raises(CorruptDataError, match="CRC mismatch") as err:
        list(arrow_batches(batches, CrcChecks.DECODER, "t", 0, min_offset=10))
    assert err.value.offset == 0
    assert "obj" in str(err.value)
