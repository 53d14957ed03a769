"""Decoding the records inside a batch (magic 2), streamed through the batch's codec.

Record layout (after decompression)::

    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value
    | headerCount varint | headers: keyLength varint, utf-8 key, valueLength varint (-1 = null), value

Offsets are ``baseOffset + offsetDelta``. Timestamps are ``baseTimestamp + timestampDelta`` for
CreateTime batches and the batch's ``maxTimestamp`` for LogAppendTime batches (the broker stamps only the
header). A control batch holds one record whose key is ``version i16, type i16`` (0 ABORT, 1 COMMIT)
and whose value, for transaction markers, is ``version i16, coordinatorEpoch i32``.

Compressed payloads are inflated ``chunk_size`` bytes at a time, so a batch's records are never all in
memory at once; a record itself is always held whole.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import IntEnum
from typing import NamedTuple

from storage_core.errors import CorruptDataError
from storage_core.formats.codecs import Codec, CodecError, Reader, open_decompressed
from storage_core.formats.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    RawBatch,
    TimestampType,
    validate_crc,
)
from storage_core.formats.varint import VarintError, decode_varint, decode_varlong

_CONTROL_KEY = struct.Struct(">hh")
Header = tuple[str, bytes | None]


class ControlType(IntEnum):
    """Control record types that can appear in a partition's log (the key's second i16)."""

    ABORT = 0
    COMMIT = 1


class Record(NamedTuple):
    """One record with the batch facts a reader needs to apply isolation and report provenance.

    ``leader_epoch`` is the batch's partition leader epoch (None when unset). ``control_type`` is set
    only for control records: a :class:`ControlType` when known, else the raw type number.
    """

    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    leader_epoch: int | None
    producer_id: int
    producer_epoch: int
    is_transactional: bool
    is_control: bool
    control_type: int | None


class _Malformed(Exception):
    """Internal: a record that does not parse; turned into CorruptDataError with the batch context."""


class _StreamBuffer:
    """A sliding window over a decompressing reader, refilled as the parser asks for more."""

    def __init__(self, reader: Reader, chunk_size: int) -> None:
        self._reader = reader
        self._chunk_size = chunk_size
        self.buf: bytes = b""
        self.pos = 0
        self.eof = False

    def ensure(self, count: int) -> bool:
        """Make ``count`` bytes available from ``pos``; False if the stream ends first."""
        if len(self.buf) - self.pos >= count:
            return True
        parts = [self.buf[self.pos :]]
        have = len(parts[0])
        while have < count and not self.eof:
            chunk = self._reader.read(max(self._chunk_size, count - have))
            if not chunk:
                self.eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        self.buf = b"".join(parts)
        self.pos = 0
        return have >= count

    def at_end(self) -> bool:
        return not self.ensure(1)


_RecordFields = tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]


def _parse_record(buf: bytes, pos: int, end: int) -> _RecordFields:
    """Fields of the record body in ``buf[pos:end]``: timestamp delta, offset delta, key, value, headers."""
    pos += 1  # record attributes: unused since magic 2
    ts_delta, pos = decode_varlong(buf, pos)
    offset_delta, pos = decode_varint(buf, pos)
    key, pos = _nullable_bytes(buf, pos, end, "key")
    value, pos = _nullable_bytes(buf, pos, end, "value")
    if pos < end and buf[pos] == 0:  # no headers, the common case
        pos += 1
        headers: tuple[Header, ...] = ()
    else:
        headers, pos = _parse_headers(buf, pos, end)
    if pos != end:
        raise _Malformed(f"record declares {end} bytes but its fields end at {pos}")
    return ts_delta, offset_delta, key, value, headers


def _parse_headers(buf: bytes, pos: int, end: int) -> tuple[tuple[Header, ...], int]:
    header_count, pos = decode_varint(buf, pos)
    if not 0 <= header_count <= (end - pos) // 2:
        raise _Malformed(f"header count {header_count} does not fit the record")
    headers: list[Header] = []
    for _ in range(header_count):
        if pos >= end:
            raise _Malformed("headers run past the record")
        hkey_len, pos = decode_varint(buf, pos)
        if hkey_len < 0 or pos + hkey_len > end:
            raise _Malformed(f"header key length {hkey_len} is invalid")
        # Java decodes header keys leniently (malformed bytes become U+FFFD); do the same.
        hkey = bytes(buf[pos : pos + hkey_len]).decode("utf-8", errors="replace")
        pos += hkey_len
        hval, pos = _nullable_bytes(buf, pos, end, "header value")
        headers.append((hkey, hval))
    return tuple(headers), pos


def _nullable_bytes(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    """A varint length and that many bytes (length -1: null), which must end by ``end``."""
    length, pos = decode_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise _Malformed(f"{what} of {length} bytes runs past the record")
    return bytes(buf[pos : pos + length]), pos + length  # no copy when buf is already bytes


def _record_bodies_uncompressed(data: bytes, count: int) -> Iterator[tuple[bytes, int, int]]:
    pos = 0
    for _ in range(count):
        length, pos = decode_varint(data, pos)
        end = pos + length
        if length < 0 or end > len(data):
            raise _Malformed(f"record length {length} runs past the batch")
        yield data, pos, end
        pos = end
    if pos != len(data):
        raise _Malformed(f"{len(data) - pos} bytes left after the declared {count} records")


def _record_bodies_stream(stream: _StreamBuffer, count: int) -> Iterator[tuple[bytes, int, int]]:
    for _ in range(count):
        stream.ensure(5)  # a varint length is at most 5 bytes; fewer is fine at the end
        length, pos = decode_varint(stream.buf, stream.pos)
        if length < 0:
            raise _Malformed(f"negative record length {length}")
        stream.pos = pos
        if not stream.ensure(length):
            raise _Malformed(f"record of {length} bytes runs past the decompressed data")
        start = stream.pos
        stream.pos = start + length
        yield stream.buf, start, start + length
    if not stream.at_end():
        raise _Malformed(f"decompressed data continues after the declared {count} records")


def iter_records(
    batch: bytes | bytearray | memoryview | RawBatch,
    *,
    verify_crc: bool = True,
    path: str | None = None,
    position: int | None = None,
    chunk_size: int = 1 << 16,
) -> Iterator[Record]:
    """Yield the records of one complete batch in offset order.

    ``verify_crc`` checks the batch CRC first (skip it only for bytes already validated). Damage in the
    records (bad varints, lengths that run past the batch, a codec error, a count mismatch) raises
    ``CorruptDataError`` naming the batch's base offset; ``path``/``position`` go into the message.
    """
    if isinstance(batch, RawBatch):
        position = batch.position if position is None else position
        data: bytes | bytearray | memoryview = batch.data
    else:
        data = batch
    if verify_crc:
        header = validate_crc(data, path=path, position=position)
    else:
        header = BatchHeader.parse(data, path=path, position=position)
    try:
        yield from _records(header, memoryview(data)[HEADER_SIZE : header.size_in_bytes], chunk_size)
    except (_Malformed, VarintError, CodecError) as exc:
        where = "" if position is None else f" at byte {position}"
        message = f"malformed record batch{where}: {exc}"
        raise CorruptDataError(message, offset=header.base_offset, path=path) from exc


def _records(header: BatchHeader, payload: memoryview, chunk_size: int) -> Iterator[Record]:
    if header.records_count == 0:
        # Like Kafka, an empty batch (the cleaner keeps some to preserve producer state) has no payload
        # worth reading, whatever its codec bits say.
        return
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    timestamp_type = header.timestamp_type
    log_append_time = header.max_timestamp if timestamp_type is TimestampType.LOG_APPEND_TIME else None
    leader_epoch = header.leader_epoch
    producer_id = header.producer_id
    producer_epoch = header.producer_epoch
    transactional = header.is_transactional
    control = header.is_control
    bodies: Iterator[tuple[bytes, int, int]]
    if header.codec is Codec.NONE:
        # One copy of the payload up front: indexing bytes is much faster than indexing a memoryview.
        bodies = _record_bodies_uncompressed(bytes(payload), header.records_count)
    else:
        stream = _StreamBuffer(open_decompressed(header.codec, payload), chunk_size)
        bodies = _record_bodies_stream(stream, header.records_count)
    new_record = tuple.__new__  # a NamedTuple's own constructor costs ~0.5 us a record more
    for buf, start, end in bodies:
        ts_delta, offset_delta, key, value, headers = _parse_record(buf, start, end)
        control_type: int | None = None
        if control:
            control_type = _control_type(key)
        yield new_record(
            Record,
            (
                base_offset + offset_delta,
                base_timestamp + ts_delta if log_append_time is None else log_append_time,
                timestamp_type,
                key,
                value,
                headers,
                leader_epoch,
                producer_id,
                producer_epoch,
                transactional,
                control,
                control_type,
            ),
        )


def _control_type(key: bytes | None) -> int:
    if key is None or len(key) < _CONTROL_KEY.size:
        raise _Malformed("control record key must hold version i16 and type i16")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise _Malformed(f"control record key has negative version {version}")
    try:
        return ControlType(kind)
    except ValueError:
        return int(kind)


def decode_records(
    batch: bytes | bytearray | memoryview | RawBatch, *, verify_crc: bool = True, path: str | None = None
) -> list[Record]:
    """All records of one batch as a list (see :func:`iter_records`)."""
    return list(iter_records(batch, verify_crc=verify_crc, path=path))
