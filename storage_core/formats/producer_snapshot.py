"""Producer state snapshots, ``<20-digit offset>.snapshot``: the idempotence/transaction state of every
producer as of that offset (exclusive), which the broker loads instead of replaying the log.

Layout (big-endian), version 1, the only version Kafka has written::

    version i16 | crc u32 (CRC-32C of every byte after this field) | count i32 | count x 46-byte entries
    entry: producerId i64, producerEpoch i16, lastSequence i32, lastOffset i64, offsetDelta i32,
           timestamp i64, coordinatorEpoch i32, currentTxnFirstOffset i64 (-1: no open transaction)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from storage_core.errors import CorruptDataError
from storage_core.formats.crc import crc32c

SNAPSHOT_VERSION = 1
_PREAMBLE = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
ENTRY_SIZE = _ENTRY.size
_CRC_FROM = _PREAMBLE.size


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """One producer's state in a snapshot."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int
    """First offset of the producer's open transaction, or -1."""

    @property
    def has_open_transaction(self) -> bool:
        return self.current_txn_first_offset >= 0


def parse_producer_snapshot(data: bytes, *, path: str | None = None) -> list[ProducerEntry]:
    """Entries of a snapshot file, after checking its version, CRC and length."""
    if len(data) < _PREAMBLE.size + _COUNT.size:
        raise CorruptDataError(f"producer snapshot of {len(data)} bytes is too short", path=path)
    version, stored_crc = _PREAMBLE.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptDataError(f"unknown producer snapshot version {version}", path=path)
    actual_crc = crc32c(memoryview(data)[_CRC_FROM:])
    if actual_crc != stored_crc:
        problem = f"producer snapshot CRC mismatch: stored {stored_crc:#010x}, computed {actual_crc:#010x}"
        raise CorruptDataError(problem, path=path)
    (count,) = _COUNT.unpack_from(data, _PREAMBLE.size)
    body = memoryview(data)[_PREAMBLE.size + _COUNT.size :]
    if count < 0 or len(body) != count * ENTRY_SIZE:
        raise CorruptDataError(
            f"producer snapshot declares {count} entries but has {len(body)} bytes of entries", path=path
        )
    return [ProducerEntry(*fields) for fields in _ENTRY.iter_unpack(body)]


def encode_producer_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    """Bytes of a version-1 snapshot holding ``entries`` (CRC filled in)."""
    items = list(entries)
    body = _COUNT.pack(len(items)) + b"".join(
        _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in items
    )
    return _PREAMBLE.pack(SNAPSHOT_VERSION, crc32c(body)) + body
