"""Record batches built by an independent encoder (kafka-python's DefaultRecordBatchBuilder) for the
format tests, plus kafka-python's own decoder as a second opinion.

kafka-python writes what a producer sends: base offset 0, leader epoch 0, CreateTime, never a control
batch. The broker-side changes (assigning offsets and the leader epoch, stamping LogAppendTime, writing
transaction markers) are applied here the way a broker applies them: patch the header, and recompute
the CRC with kafka-python's checksum when a checksummed field changed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

GZIP, SNAPPY, LZ4, ZSTD, NONE = 1, 2, 3, 4, 0
ALL_CODECS = (NONE, GZIP, SNAPPY, LZ4, ZSTD)


@dataclass(frozen=True)
class Rec:
    """What a test puts into a batch (and so expects back)."""

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())


def build_batch(
    records: list[Rec],
    *,
    codec: int = NONE,
    base_offset: int = 0,
    leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    log_append_time: int | None = None,
    control: bool = False,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for rec in records:
        meta = builder.append(rec.offset_delta, rec.timestamp, rec.key, rec.value, list(rec.headers))
        assert meta is not None
    buf = bytearray(builder.build())
    if (buf[22] & 0x07) != codec:
        raise AssertionError(f"kafka-python did not compress with codec {codec}: use compressible values")
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)
    if log_append_time is not None or control:
        (attributes,) = struct.unpack_from(">h", buf, 21)
        if log_append_time is not None:
            attributes |= 0x08
            struct.pack_into(">q", buf, 35, log_append_time)
        if control:
            attributes |= 0x20
        struct.pack_into(">h", buf, 21, attributes)
        struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    return bytes(buf)


def control_batch(
    *,
    commit: bool,
    base_offset: int,
    producer_id: int,
    timestamp: int,
    producer_epoch: int = 0,
    coordinator_epoch: int = 0,
    leader_epoch: int = 0,
) -> bytes:
    """A transaction marker as a broker writes it: one record, key (version 0, type), value
    (version 0, coordinator epoch)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [Rec(0, timestamp, key, value)],
        base_offset=base_offset,
        leader_epoch=leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


DecodedRecord = tuple[int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def kafka_python_records(batch: bytes) -> list[DecodedRecord]:
    """(offset, timestamp, timestamp type, key, value, headers) per record, decoded by kafka-python."""
    reader = DefaultRecordBatch(batch)
    assert reader.validate_crc()
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, list(r.headers)) for r in reader]


def compressible_value(i: int, size: int = 300) -> bytes:
    return (f"value-{i:08d}-" * (size // 15 + 1)).encode()[:size]


def make_segment(batch_count: int = 30, first_offset: int = 1000) -> tuple[bytes, list[tuple[int, int, int]]]:
    """A segment of batches with every codec; returns it and (position, base offset, record count)."""
    parts = []
    layout = []
    position = 0
    offset = first_offset
    for i in range(batch_count):
        count = 1 + i % 9
        recs = [Rec(d, 10_000 + i * 100 + d, f"k{d}".encode(), compressible_value(d)) for d in range(count)]
        batch = build_batch(
            recs, codec=ALL_CODECS[i % len(ALL_CODECS)], base_offset=offset, leader_epoch=i // 10
        )
        parts.append(batch)
        layout.append((position, offset, count))
        position += len(batch)
        offset += count + (i % 3)  # gaps, as compaction leaves
    return b"".join(parts), layout
