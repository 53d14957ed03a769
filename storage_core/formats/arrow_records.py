"""Decoding record batches straight into Arrow, with the columns of Spark's Kafka source.

Schema (the order and types of ``spark.read.format("kafka")``, so the two can be unioned)::

    key binary, value binary, topic string, partition int32, offset int64,
    timestamp timestamp[us, UTC], timestampType int32 [, headers list<struct<key string, value binary>>]

The record walk runs in one compiled loop (arrow_kernels.py) over the decompressed payloads of a whole
group of batches and copies each key and value into the Arrow buffers as it parses the record;
decompression goes through codecs.py like everywhere else. No Python object is created per record.
The result equals :func:`~storage_core.formats.records.iter_records` record for record
(tests/formats/test_formats_arrow_records.py checks that on generated and real data): offsets,
timestamps (LogAppendTime batches carry ``maxTimestamp``), keys, values, nulls, headers (keys decoded
leniently, as Java does) and the same ``CorruptDataError`` for damaged records.

What to decode (control batches, aborted transactions) is the caller's decision: the reader hands in
only the batches its isolation level serves. A control batch handed in anyway is skipped here, since a
control record is never data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from storage_core.errors import CorruptDataError
from storage_core.formats import crc_kernel
from storage_core.formats.arrow_kernels import CRC_MISMATCH, OK, PROBLEMS, gather, scan_headers, scan_records
from storage_core.formats.codecs import Codec, CodecError, open_decompressed
from storage_core.formats.record_batch import (
    CRC_START,
    HEADER_SIZE,
    RawBatch,
    TimestampType,
    compute_crc,
    crc_mismatch,
)

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
"""One record header, as Spark's Kafka source shows it."""


def kafka_schema(include_headers: bool = False, *, zero_copy: bool = False) -> pa.Schema:
    """The Arrow schema of Spark's Kafka source (``includeHeaders`` adds the last column); with
    ``zero_copy``, key and value are ``binary_view`` columns instead of ``binary``."""
    blob = pa.binary_view() if zero_copy else pa.binary()
    fields = [
        pa.field("key", blob),
        pa.field("value", blob),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(HEADER_TYPE)))
    return pa.schema(fields)


_NO_CRC_CHECKS = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.uint64))


class _Payloads:
    """The decompressed record payloads of a group of batches, back to back in one buffer.

    With ``verify_crc`` every batch's CRC is checked: by the record walk (``crc_checks`` holds the ranges
    and stored values) where it reads the batches where they lie and has the CRC instruction, else here,
    before a batch is decompressed or copied."""

    def __init__(self, batches: Sequence[RawBatch], path: str | None, verify_crc: bool = False) -> None:
        n = len(batches)
        self.starts = np.empty(n, np.int64)
        self.ends = np.empty(n, np.int64)
        self.counts = np.empty(n, np.int64)
        self.base_offsets = np.empty(n, np.int64)
        self.base_timestamps = np.empty(n, np.int64)
        self.append_times = np.empty(n, np.int64)
        for i, batch in enumerate(batches):
            header = batch.header
            # A control batch is never data; an empty batch (kept by the cleaner) has nothing to read,
            # whatever its codec bits say (as in records.py).
            self.counts[i] = 0 if header.is_control else header.records_count
            self.base_offsets[i] = header.base_offset
            self.base_timestamps[i] = header.base_timestamp
            log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
            self.append_times[i] = header.max_timestamp if log_append else -1
        self.total = int(self.counts.sum()) if n else 0
        self.crc_checks = _NO_CRC_CHECKS
        in_place = self._in_place(batches)
        if in_place and verify_crc and crc_kernel.HARDWARE:
            self.crc_checks = self._crc_ranges(batches)
        elif verify_crc:
            for batch in batches:
                if compute_crc(batch.data) != batch.header.crc:
                    raise _crc_damage(batch, path)
        if not in_place:
            self._gathered(batches, path)

    def _crc_ranges(self, batches: Sequence[RawBatch]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where in ``buf`` each batch's checksummed bytes lie, and its stored CRC."""
        n = len(batches)
        sizes = np.fromiter((b.header.size_in_bytes for b in batches), np.int64, n)
        stored = np.fromiter((b.header.crc for b in batches), np.uint64, n)
        return self.batch_at + CRC_START, self.batch_at + sizes, stored

    def _in_place(self, batches: Sequence[RawBatch]) -> bool:
        """Point at the payloads where they lie when every batch is a view of one buffer (a mapped local
        object) and every batch with records is uncompressed: no copy of the payloads at all."""
        owner: object = None
        for batch, count in zip(batches, self.counts.tolist()):
            data = batch.data
            if not isinstance(data, memoryview) or (count and batch.header.codec is not Codec.NONE):
                return False
            if owner is None:
                owner = data.obj
            elif data.obj is not owner:
                return False
        if owner is None:
            return False
        base = np.frombuffer(owner, np.uint8)  # type: ignore[call-overload]
        base_address = _address(base)
        self.batch_at = np.empty(len(batches), np.int64)
        for i, batch in enumerate(batches):
            at = _address(np.frombuffer(batch.data, np.uint8)) - base_address  # a batch is never empty
            self.batch_at[i] = at
            self.starts[i] = at + HEADER_SIZE if self.counts[i] else at
            self.ends[i] = at + batch.header.size_in_bytes if self.counts[i] else at
        self.buf = base
        return True

    def _gathered(self, batches: Sequence[RawBatch], path: str | None) -> None:
        """The decompressed payloads back to back in one new buffer."""
        parts: list[bytes | memoryview] = []
        pos = 0
        for i, batch in enumerate(batches):
            header = batch.header
            payload: bytes | memoryview = memoryview(batch.data)[HEADER_SIZE : header.size_in_bytes]
            if self.counts[i] == 0:
                payload = b""
            elif header.codec is not Codec.NONE:
                try:
                    payload = open_decompressed(header.codec, payload).read()
                except CodecError as exc:
                    raise _damage(batch, str(exc), path) from exc
            parts.append(payload)
            self.starts[i] = pos
            pos += len(payload)
            self.ends[i] = pos
        self.buf = np.frombuffer(b"".join(parts), np.uint8) if pos else np.zeros(0, np.uint8)


def _address(array: np.ndarray) -> int:
    # The array interface, not ``.ctypes.data``: that builds a ctypes object, ~10x slower, once per batch.
    address: int = array.__array_interface__["data"][0]
    return address


def _damage(batch: RawBatch, problem: str, path: str | None) -> CorruptDataError:
    return CorruptDataError(
        f"malformed record batch at byte {batch.position}: {problem}",
        offset=batch.header.base_offset,
        path=batch.path or path,
    )


def _crc_damage(batch: RawBatch, path: str | None) -> CorruptDataError:
    """The reader's error for a CRC mismatch (record_batch.crc_mismatch), word for word."""
    actual = compute_crc(batch.data)
    return crc_mismatch(batch.header, actual, path=batch.path or path, position=batch.position)


def _writable(nbytes: int, dtype: type[np.generic]) -> tuple[pa.Buffer, np.ndarray]:
    """A buffer from Arrow's memory pool and a numpy view to fill it through. The pool (mimalloc or
    jemalloc) hands the memory of batches already dropped to the next one, so the copies land in memory
    that is mapped and still in cache; a fresh ``np.empty`` of megabytes is a new mapping whose every page
    faults (and is zeroed) on first write, which cost more than the copy itself."""
    buffer = pa.allocate_buffer(nbytes)
    return buffer, np.frombuffer(buffer, dtype)


def _binary(buf: np.ndarray, pos: np.ndarray, lengths: np.ndarray, kind: pa.DataType) -> pa.Array:
    n = len(pos)
    total = int(np.maximum(lengths, 0).sum())
    if total >= 1 << 31:  # Arrow binary offsets are 32-bit
        raise CorruptDataError(f"{total} bytes of {kind} in one Arrow batch; decode fewer batches at once")
    offsets_buffer, offsets = _writable(4 * (n + 1), np.int32)
    data_buffer, data = _writable(total, np.uint8)
    gather(buf, pos, lengths, offsets, data)
    valid = lengths >= 0
    null_count = n - int(valid.sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(kind, n, [validity, offsets_buffer, data_buffer], null_count)


def _header_keys(buf: np.ndarray, pos: np.ndarray, lengths: np.ndarray, non_ascii: bool) -> pa.Array:
    if not non_ascii:
        return _binary(buf, pos, lengths, pa.string())
    # Java decodes header keys leniently (malformed UTF-8 becomes U+FFFD); Arrow strings must be valid
    # UTF-8, so the rare group with non-ASCII keys takes the Python path for its keys.
    return pa.array(
        [
            bytes(buf[p : p + n]).decode("utf-8", errors="replace")
            for p, n in zip(pos.tolist(), lengths.tolist())
        ],
        pa.string(),
    )


def _headers(
    payloads: _Payloads, header_pos: np.ndarray, header_count: np.ndarray, non_ascii: bool
) -> pa.Array:
    total = int(header_count.sum())
    hkey_pos = np.empty(total, np.int64)
    hkey_len = np.empty(total, np.int64)
    hval_pos = np.empty(total, np.int64)
    hval_len = np.empty(total, np.int64)
    scan_headers(payloads.buf, header_pos, header_count, hkey_pos, hkey_len, hval_pos, hval_len)
    keys = _header_keys(payloads.buf, hkey_pos, hkey_len, non_ascii)
    values = _binary(payloads.buf, hval_pos, hval_len, pa.binary())
    entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
    list_offsets = np.zeros(len(header_count) + 1, np.int32)
    np.cumsum(header_count, out=list_offsets[1:])
    # Spark's Kafka source shows a record without headers as a null array, not an empty one.
    has = header_count > 0
    null_count = len(has) - int(has.sum())
    validity = pa.py_buffer(np.packbits(has, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        pa.list_(HEADER_TYPE),
        len(has),
        [validity, pa.py_buffer(list_offsets)],
        null_count,
        children=[entries],
    )


def _repeated_string(text: str, n: int) -> pa.Array:
    raw = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    data = np.frombuffer(raw * n, np.uint8) if n else np.zeros(0, np.uint8)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)], 0)


def decode_arrow(
    batches: Sequence[RawBatch],
    topic: str,
    partition: int,
    *,
    include_headers: bool = False,
    min_offset: int | None = None,
    end_offset: int | None = None,
    path: str | None = None,
    zero_copy: bool = False,
    verify_crc: bool = False,
) -> pa.RecordBatch:
    """Every record of ``batches`` (whole batches in offset order, CRC-checked already, or by this call
    with ``verify_crc``) as one Arrow batch.

    Only records with ``min_offset <= offset < end_offset`` are kept (the first batch a read starts
    from may begin before its offset). Raises ``CorruptDataError`` naming the batch for damaged records
    or payloads, like the record decoder. ``zero_copy``: key and value as ``binary_view`` columns that
    point into the stored (or decompressed) bytes instead of copies of them. ``verify_crc``: check every
    batch's CRC-32C, during the record walk where it can (a mapped object's batches: they are read from
    memory once instead of twice), and raise the reader's ``CorruptDataError`` for a mismatch; nothing
    of the group is returned then.
    """
    payloads = _Payloads(batches, path, verify_crc)
    n = payloads.total
    offsets = np.empty(n, np.int64)
    timestamps = np.empty(n, np.int64)
    key_pos = np.empty(n, np.int64)
    key_len = np.empty(n, np.int64)
    value_pos = np.empty(n, np.int64)
    value_len = np.empty(n, np.int64)
    header_pos = np.empty(n, np.int64)
    header_count = np.empty(n, np.int64)
    # View entries hold 32-bit offsets into the buffer; past that, copy and cast (never for a Kafka
    # segment, whose size is an int32).
    views = zero_copy and payloads.buf.shape[0] < 1 << 31
    if views:
        # The record walk writes each key's and value's view entry (arrow_kernels.py).
        key_data = np.zeros(16 * n, np.uint8)
        value_data = np.zeros(16 * n, np.uint8)
        key_offsets, value_offsets = key_data.view(np.int32), value_data.view(np.int32)
    else:
        # The record walk copies keys and values, each into a buffer as large as the payloads: they cannot
        # hold more than that.
        room = int((payloads.ends - payloads.starts).sum())
        if room >= 1 << 31:  # Arrow binary offsets are 32-bit
            raise CorruptDataError(
                f"{room} bytes of records in one Arrow batch; decode fewer batches at once"
            )
        key_data_buffer, key_data = _writable(room, np.uint8)
        value_data_buffer, value_data = _writable(room, np.uint8)
        key_offsets_buffer, key_offsets = _writable(4 * (n + 1), np.int32)
        value_offsets_buffer, value_offsets = _writable(4 * (n + 1), np.int32)
    problem, bad, _headers_total, non_ascii = scan_records(
        payloads.buf,
        payloads.starts,
        payloads.ends,
        payloads.counts,
        payloads.base_offsets,
        payloads.base_timestamps,
        payloads.append_times,
        offsets,
        timestamps,
        key_pos,
        key_len,
        value_pos,
        value_len,
        header_pos,
        header_count,
        not views,
        key_data,
        key_offsets,
        value_data,
        value_offsets,
        *payloads.crc_checks,
    )
    if problem == CRC_MISMATCH:
        raise _crc_damage(batches[bad], path)
    if problem != OK:
        raise _damage(batches[bad], PROBLEMS[problem], path)
    if views:
        blobs = [_viewed(key_len, key_data, payloads.buf), _viewed(value_len, value_data, payloads.buf)]
    else:
        blobs = [
            _copied(key_len, key_offsets_buffer, key_data_buffer),
            _copied(value_len, value_offsets_buffer, value_data_buffer),
        ]
        if zero_copy:
            blobs = [blob.cast(pa.binary_view()) for blob in blobs]
    columns: list[Any] = [
        *blobs,
        _repeated_string(topic, n),
        pa.array(np.full(n, partition, np.int32)),
        pa.array(offsets),
        pa.array(timestamps * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(_timestamp_types(batches, payloads, offsets)),
    ]
    if include_headers:
        columns.append(_headers(payloads, header_pos, header_count, bool(non_ascii)))
    out = pa.RecordBatch.from_arrays(columns, schema=kafka_schema(include_headers, zero_copy=zero_copy))
    return _window(out, offsets, min_offset, end_offset)


def _copied(lengths: np.ndarray, offsets: pa.Buffer, data: pa.Buffer) -> pa.Array:
    """A ``binary`` column from the offsets and bytes the record walk wrote (nulls where length < 0)."""
    n = len(lengths)
    used = int(np.frombuffer(offsets, np.int32)[n]) if n else 0
    if used < data.size // 2:
        # Room was made for the whole payloads; keys (or small values beside large keys) use a fraction of
        # it. A batch the caller keeps should not hold the rest: copy the bytes to a buffer of their size.
        fitted, view = _writable(used, np.uint8)
        view[:] = np.frombuffer(data, np.uint8, count=used)
        data = fitted
    valid = lengths >= 0
    null_count = n - int(valid.sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(pa.binary(), n, [validity, offsets, data], null_count)


def _viewed(lengths: np.ndarray, entries: np.ndarray, buf: np.ndarray) -> pa.Array:
    """A ``binary_view`` column from the entries the record walk wrote, pointing into ``buf`` itself:
    16 bytes per value and no copy of the values (the column keeps ``buf``, the mapped object or the
    group's decompressed payloads, alive)."""
    n = len(lengths)
    valid = lengths >= 0
    null_count = n - int(valid.sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        pa.binary_view(), n, [validity, pa.py_buffer(entries), pa.py_buffer(buf)], null_count
    )


def _window(out: pa.RecordBatch, offsets: np.ndarray, lo: int | None, hi: int | None) -> pa.RecordBatch:
    """The rows of ``out`` with ``lo <= offset < hi``. Offsets increase through a group of batches, so
    those are one run of rows, a slice (no copy); anything else is taken row by row."""
    if lo is None and hi is None:
        return out
    keep = np.ones(len(offsets), bool)
    if lo is not None:
        keep &= offsets >= lo
    if hi is not None:
        keep &= offsets < hi
    rows = np.flatnonzero(keep)
    if len(rows) == len(offsets):
        return out
    if len(rows) == 0:
        return out.slice(0, 0)
    first, last = int(rows[0]), int(rows[-1])
    if last - first + 1 == len(rows):
        return out.slice(first, len(rows))
    return out.take(pa.array(rows))


def _timestamp_types(batches: Sequence[RawBatch], payloads: _Payloads, offsets: np.ndarray) -> np.ndarray:
    """Kafka's timestamp type id (0 CreateTime, 1 LogAppendTime) of each record, from its batch."""
    kinds = (payloads.append_times >= 0).astype(np.int32)
    if not kinds.any() or len(offsets) == 0:
        return np.zeros(len(offsets), np.int32)
    # Batches hold disjoint, increasing offset ranges: each record's batch is found by its offset.
    firsts = payloads.base_offsets
    return kinds[np.searchsorted(firsts, offsets, side="right") - 1]


def empty_arrow(include_headers: bool = False) -> pa.RecordBatch:
    """A batch with the Kafka source's columns and no rows."""
    return pa.RecordBatch.from_pylist([], schema=kafka_schema(include_headers))
