"""Record batches (magic 2), the unit of a Kafka ``.log`` segment: header parsing, CRC checks and
streaming iteration over a segment.

Layout (big-endian), 61-byte header then the records::

    @0  baseOffset i64          @8  batchLength i32 (bytes after this field)
    @12 partitionLeaderEpoch i32 @16 magic i8 (= 2)    @17 crc u32 (CRC-32C of @21..end)
    @21 attributes i16          @23 lastOffsetDelta i32 @27 baseTimestamp i64
    @35 maxTimestamp i64        @43 producerId i64      @51 producerEpoch i16
    @53 baseSequence i32        @57 recordsCount i32    @61 records (compressed as one unit)

The leader epoch sits outside the CRC so a leader can stamp it without re-checksumming.

Damage is reported as :class:`~storage_core.errors.CorruptDataError` naming the batch's offset and the
file. A batch cut short by the end of the data is reported as :class:`TruncatedTailError`, a subclass:
that is what a partial write leaves at the end of an active segment, and Kafka's recovery truncates it
instead of failing, so callers may want to treat it differently from damage in the middle.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from storage_core.errors import CorruptDataError
from storage_core.formats.codecs import Codec
from storage_core.formats.crc import crc32c
from storage_core.formats.source import ByteSource, ChunkCursor, ViewFetcher, as_fetcher, source_size

HEADER_SIZE = 61
LOG_OVERHEAD = 12
"""baseOffset + batchLength: the bytes before the part ``batchLength`` counts."""
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MAGIC_V2 = 2
CRC_START = 21
"""The CRC covers the batch from the attributes field to its end."""
NO_PRODUCER_ID = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_ATTR_CODEC_MASK = 0x07
_ATTR_LOG_APPEND_TIME = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_DELETE_HORIZON = 0x40
_MAX_CODEC = max(Codec)


class TimestampType(IntEnum):
    """Bit 3 of the batch attributes."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class TruncatedTailError(CorruptDataError):
    """The data ends inside a batch (or inside a batch header): a partial write at the end of a file."""

    def __init__(
        self, message: str, *, position: int, offset: int | None = None, path: str | None = None
    ) -> None:
        super().__init__(message, offset=offset, path=path)
        self.position = position


def framing_problem(magic: int, batch_length: int) -> str | None:
    """What makes a batch's framing unreadable (a magic other than 2, a length below the header's), or None.

    Checked before anything else of a batch is trusted, by the header parser and by the restore's batch
    chain check, which frames batches without parsing their headers."""
    if magic != MAGIC_V2:
        return f"unsupported record batch magic {magic} (only magic 2 is supported)"
    if batch_length < MIN_BATCH_LENGTH:
        return f"record batch length {batch_length} is below the minimum {MIN_BATCH_LENGTH}"
    return None


def _damage(problem: str, offset: int | None, path: str | None, position: int | None) -> CorruptDataError:
    where = "" if position is None else f" at byte {position}"
    return CorruptDataError(problem + where, offset=offset, path=path)


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte header of a magic-2 record batch, field by field."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def parse(
        cls,
        buf: bytes | bytearray | memoryview,
        pos: int = 0,
        *,
        path: str | None = None,
        position: int | None = None,
    ) -> BatchHeader:
        """Parse and sanity-check the header at ``buf[pos:pos + 61]``.

        ``path`` and ``position`` (the header's byte position in its file) only go into error messages.
        Raises ``CorruptDataError`` for a wrong magic, a ``batchLength`` below the header size, an unknown
        codec or negative counts; the CRC is not checked here (see :func:`validate_crc`).
        """
        if len(buf) - pos < HEADER_SIZE:
            short = f"record batch header needs {HEADER_SIZE} bytes, got {len(buf) - pos}"
            raise _damage(short, None, path, position)
        header = cls(*_HEADER.unpack_from(buf, pos))
        problem = framing_problem(header.magic, header.batch_length)
        if problem is None and header.attributes & _ATTR_CODEC_MASK > _MAX_CODEC:
            problem = f"unknown compression codec {header.attributes & _ATTR_CODEC_MASK}"
        if problem is None and (header.last_offset_delta < 0 or header.records_count < 0):
            problem = (
                f"negative lastOffsetDelta {header.last_offset_delta} or recordsCount {header.records_count}"
            )
        if problem is not None:
            raise _damage(problem, header.base_offset, path, position)
        return header

    def encode(self) -> bytes:
        """The 61 header bytes (as stored; the CRC field is written as is, not recomputed)."""
        return _HEADER.pack(
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )

    @property
    def codec(self) -> Codec:
        return Codec(self.attributes & _ATTR_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & _ATTR_LOG_APPEND_TIME:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        """Set by the log cleaner (3.1+): ``base_timestamp`` then holds the delete horizon."""
        return bool(self.attributes & _ATTR_DELETE_HORIZON)

    @property
    def first_record_timestamp(self) -> int:
        """The first record's timestamp as far as the header tells.

        ``base_timestamp`` for CreateTime batches; ``max_timestamp`` for LogAppendTime batches (every
        record carries it) and for batches the log cleaner re-based on a delete horizon (an upper bound).
        """
        if self.attributes & (_ATTR_LOG_APPEND_TIME | _ATTR_DELETE_HORIZON):
            return self.max_timestamp
        return self.base_timestamp

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        """Bytes of the whole batch, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def leader_epoch(self) -> int | None:
        """The partition leader epoch, or None when the batch carries none (-1)."""
        epoch = self.partition_leader_epoch
        return None if epoch == NO_PARTITION_LEADER_EPOCH else epoch


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C of a whole batch's checksummed range (attributes to end)."""
    return crc32c(memoryview(batch)[CRC_START:])


def validate_crc(
    batch: bytes | bytearray | memoryview, *, path: str | None = None, position: int | None = None
) -> BatchHeader:
    """Check one complete batch (header, length and CRC); return its header.

    Raises ``CorruptDataError`` naming the batch's base offset when the bytes do not hold exactly one
    batch or the stored CRC does not match.
    """
    header = BatchHeader.parse(batch, path=path, position=position)
    if len(batch) != header.size_in_bytes:
        problem = f"record batch declares {header.size_in_bytes} bytes but {len(batch)} were given"
        raise _damage(problem, header.base_offset, path, position)
    actual = compute_crc(batch)
    if actual != header.crc:
        raise crc_mismatch(header, actual, path=path, position=position)
    return header


def crc_mismatch(
    header: BatchHeader, actual: int, *, path: str | None, position: int | None
) -> CorruptDataError:
    """The error for a batch whose computed CRC ``actual`` differs from the stored one."""
    problem = f"record batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}"
    return _damage(problem, header.base_offset, path, position)


@dataclass(frozen=True, slots=True)
class RawBatch:
    """One batch as it sits in a segment: its byte position, parsed header and all its bytes."""

    position: int
    header: BatchHeader
    data: bytes | memoryview  # a view into the fetched chunk when the batch lies inside one (no copy)
    path: str | None = None  # what it was read from, for errors found after it left the scan

    @property
    def end_position(self) -> int:
        return self.position + len(self.data)


def _truncated(
    position: int,
    available: int | None,
    needed: int,
    offset: int | None,
    path: str | None,
    what: str = "record batch",
) -> TruncatedTailError:
    into = "inside" if available is None else f"{available} bytes into"
    return TruncatedTailError(
        f"data ends {into} the {needed}-byte {what} at byte {position}",
        position=position,
        offset=offset,
        path=path,
    )


def _partial_header_offset(head: bytes) -> int | None:
    return int(_BASE_OFFSET.unpack_from(head)[0]) if len(head) >= _BASE_OFFSET.size else None


def iter_batch_headers(
    source: ByteSource,
    start_position: int = 0,
    *,
    size: int | None = None,
    path: str | None = None,
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch from ``start_position`` on, without reading bodies.

    Only the 61 header bytes of each batch are fetched, so a scan of a 1 GiB segment reads a few
    megabytes. ``size`` is the length of the data when known (file objects are measured); without it
    the end is found from short reads, which costs one extra 1-byte fetch at the very end.

    The CRC is not checked (that needs the body: use :func:`iter_batches` or
    :class:`~storage_core.formats.batch_stream.BatchStreamValidator`). Raises ``CorruptDataError`` for a
    malformed header and :class:`TruncatedTailError` after the last complete batch if the data ends
    inside a batch.
    """
    fetch = as_fetcher(source)
    if size is None and not callable(source):
        size = source_size(source)
    pos = start_position
    pending: tuple[int, BatchHeader] | None = None
    while True:
        head = fetch(pos, pos + HEADER_SIZE) if size is None or pos < size else b""
        if pending is not None:
            # With an unknown size, a batch is known to be complete only once data is seen after it,
            # or its last byte is fetched.
            if not head and not fetch(pos - 1, pos):
                p_pos, p_header = pending
                raise _truncated(p_pos, None, p_header.size_in_bytes, p_header.base_offset, path)
            yield pending
            pending = None
        if not head:
            return
        if len(head) < HEADER_SIZE:
            raise _truncated(pos, len(head), HEADER_SIZE, _partial_header_offset(head), path, "batch header")
        header = BatchHeader.parse(head, path=path, position=pos)
        end = pos + header.size_in_bytes
        if size is not None:
            if end > size:
                raise _truncated(pos, size - pos, header.size_in_bytes, header.base_offset, path)
            yield pos, header
        else:
            pending = (pos, header)
        pos = end


def iter_batches(
    source: ByteSource | ViewFetcher,
    start_position: int = 0,
    *,
    path: str | None = None,
    verify_crc: bool = True,
    chunk_size: int = 1 << 20,
) -> Iterator[RawBatch]:
    """Yield each complete batch from ``start_position`` on, CRC-checked unless ``verify_crc`` is False.

    Reads sequentially in ``chunk_size`` fetches; memory stays at about one chunk plus one batch however
    large the segment is. A batch inside one fetched chunk is a view of it, not a copy. Raises
    ``CorruptDataError`` (with the batch's offset) on damage and :class:`TruncatedTailError` if the data
    ends inside a batch.
    """
    # Handing each batch's CRC check to a helper thread costs more than the ~0.1 ms CRC of a 1 MB batch
    # it would overlap; checked_batches.py shares the checks of whole groups of batches instead.
    cursor = ChunkCursor(source if callable(source) else as_fetcher(source), start_position, chunk_size)
    pos = start_position
    while True:
        head = cursor.view(pos, pos + HEADER_SIZE)
        if not head:
            return
        if len(head) < HEADER_SIZE:
            raise _truncated(
                pos, len(head), HEADER_SIZE, _partial_header_offset(bytes(head)), path, "batch header"
            )
        header = BatchHeader.parse(head, path=path, position=pos)
        end = pos + header.size_in_bytes
        data = cursor.view(pos, end)
        if len(data) < header.size_in_bytes:
            raise _truncated(pos, len(data), header.size_in_bytes, header.base_offset, path)
        if verify_crc:
            validate_crc(data, path=path, position=pos)
        yield RawBatch(pos, header, data, path)
        pos = end


def read_batch_at(
    source: ByteSource, position: int, *, path: str | None = None, verify_crc: bool = True
) -> RawBatch:
    """The single batch starting at ``position`` (two fetches: header, then the rest)."""
    fetch = as_fetcher(source)
    head = fetch(position, position + HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        raise _truncated(position, len(head), HEADER_SIZE, _partial_header_offset(head), path, "batch header")
    header = BatchHeader.parse(head, path=path, position=position)
    rest = fetch(position + HEADER_SIZE, position + header.size_in_bytes)
    data = head + rest
    if len(data) < header.size_in_bytes:
        raise _truncated(position, len(data), header.size_in_bytes, header.base_offset, path)
    if verify_crc:
        validate_crc(data, path=path, position=position)
    return RawBatch(position, header, data, path)
