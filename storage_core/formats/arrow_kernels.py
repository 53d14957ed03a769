"""numba-compiled loops behind the Arrow decoder (arrow_records.py): they walk the records of many
decompressed batch payloads at once and gather keys, values and headers into Arrow buffers.

Python pays per record in records.py (a varint call, a slice, a tuple); here one compiled loop does the
whole group of batches, so the cost per record is a few nanoseconds and no Python object is made for
it. The loops only read and write numpy arrays; every bound is checked, and the first malformed record
stops the scan with a code (see ``PROBLEMS``) and its batch, which the caller turns into the same
``CorruptDataError`` the record decoder raises.

Compiled on first use and cached beside the module (``cache=True``), so a Spark worker pays the
compile once per machine, not per task.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from storage_core.formats.crc_kernel import crc32c_range

OK = 0
PROBLEMS = {
    1: "record length runs past the batch",
    2: "key runs past the record",
    3: "value runs past the record",
    4: "header count does not fit the record",
    5: "header key length is invalid",
    6: "header value runs past the record",
    7: "record fields do not end where the record's length says",
    8: "data continues after the declared records",
    9: "malformed or truncated varint",
    10: "headers run past the record",
    11: "record batch CRC mismatch",
}
CRC_MISMATCH = 11


def _jit(fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    # numba is untyped; the cast keeps mypy --strict from treating the kernels as untyped.
    return cast(Callable[..., Any], numba.njit(cache=True, nogil=True, **options)(fn))


def _zigzag_varint(buf: Any, pos: int, end: int, max_shift: int) -> tuple[Any, int]:
    """(value, next position); next position -1 when the varint is truncated or too long."""
    raw = np.uint64(0)
    shift = 0
    while True:
        if pos >= end:
            return 0, -1
        byte = np.uint64(buf[pos])
        pos += 1
        raw |= (byte & np.uint64(0x7F)) << np.uint64(shift)
        if byte < np.uint64(0x80):
            break
        shift += 7
        if shift > max_shift:
            return 0, -1
    value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
    return value, pos


_varint = _jit(_zigzag_varint)


def _memcpy_intrinsic(typingctx: Any, dst: Any, dst_at: Any, src: Any, src_at: Any, n: Any) -> Any:
    """``dst[dst_at:dst_at + n] = src[src_at:src_at + n]`` as one ``memcpy`` (bounds are the caller's).

    numba compiles a slice assignment into a byte loop that moved ~1 GB/s even with both sides in cache;
    LLVM's memcpy moved the same 1 KB values at ~8 GB/s (docs/benchmarks.md, "Spark data pipeline")."""
    sig = types.void(dst, dst_at, src, src_at, n)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        d, d_at, s, s_at, count = args
        dst_array = context.make_array(signature.args[0])(context, builder, d)
        src_array = context.make_array(signature.args[2])(context, builder, s)
        to = builder.gep(dst_array.data, [d_at])
        frm = builder.gep(src_array.data, [s_at])
        cgutils.raw_memcpy(builder, to, frm, count, 1)  # type: ignore[no-untyped-call]
        return context.get_dummy_value()

    return sig, codegen


_copy_bytes = cast(Callable[[Any, Any, Any, Any, Any], None], intrinsic(_memcpy_intrinsic))


def _write_view(out: Any, words: Any, i: int, buf: Any, p: int, n: int) -> None:
    """Entry ``i`` of an Arrow binary-view column for the ``n`` > 0 bytes at ``buf[p:]``: length, then
    the bytes inline when they fit in 12, else a 4-byte prefix, buffer 0 and the offset into ``buf``.
    ``out`` holds the entries' bytes (16 per entry, zeroed) and ``words`` is the same memory as int32
    (little-endian hosts, as Arrow's buffers are; ``p`` < 2**31, which the caller checks)."""
    words[4 * i] = n
    _copy_bytes(out, 16 * i + 4, buf, p, n if n <= 12 else 4)  # the value, or its prefix
    if n > 12:
        words[4 * i + 3] = p


_view_entry = _jit(_write_view)


def _read_field(
    buf: Any,
    pos: int,
    end: int,
    end_of_batch: int,
    r: int,
    field_pos: Any,
    field_len: Any,
    copy: bool,
    data: Any,
    offsets: Any,
    o: int,
    overrun: int,
) -> tuple[int, int, int]:
    """The key or value of record ``r`` at ``buf[pos:]`` (a varint length, then the bytes; -1: null), for
    :func:`_scan_records`: its position and length, and its copy or view entry (``o``: where the next
    copy goes). Returns (problem code, position after the field, next ``o``); problem ``overrun`` when
    the bytes run past the record ending at ``end``."""
    n, pos = _varint(buf, pos, end_of_batch, 28)
    if pos < 0:
        return 9, pos, o
    field_pos[r] = pos
    field_len[r] = n
    if n >= 0:
        if pos + n > end:
            return overrun, pos, o
        if copy and n > 0:
            _copy_bytes(data, o, buf, pos, n)
            o += n
        elif n > 0:
            _view_entry(data, offsets, r, buf, pos, n)
        pos += n
    return OK, pos, o


_field = _jit(_read_field, inline="always")


def _scan_records(
    buf: Any,
    starts: Any,
    ends: Any,
    counts: Any,
    base_offsets: Any,
    base_timestamps: Any,
    append_times: Any,
    offsets: Any,
    timestamps: Any,
    key_pos: Any,
    key_len: Any,
    value_pos: Any,
    value_len: Any,
    header_pos: Any,
    header_count: Any,
    copy: bool,
    key_data: Any,
    key_offsets: Any,
    value_data: Any,
    value_offsets: Any,
    crc_from: Any,
    crc_to: Any,
    crc_stored: Any,
) -> tuple[int, int, int, int]:
    """Fill the per-record arrays for every batch payload ``buf[starts[b]:ends[b]]``.

    Returns (problem code, batch index, header total, non-ascii header key flag); problem 0 means all
    parsed. ``append_times[b]`` >= 0 marks a LogAppendTime batch: every record carries that timestamp.

    With ``copy``, keys and values are also copied into ``key_data`` / ``value_data`` back to back, with
    their Arrow (int32) offsets, as each record is parsed: the record's bytes are then in L1 cache
    already, where a second pass over the group would fetch them again. Each needs room for the
    payloads' total bytes (keys, like values, are disjoint parts of the payloads), and a copy happens only
    after its bounds were checked. Without ``copy``, ``key_data`` / ``value_data`` receive the Arrow
    binary-view entries of the keys and values instead (see :func:`_write_view`; zeroed, 16 bytes per
    record) and ``key_offsets`` / ``value_offsets`` are the same memory as int32.

    ``crc_from`` / ``crc_to`` / ``crc_stored``, when not empty (one entry per batch): check the CRC-32C of
    ``buf[crc_from[b]:crc_to[b]]`` against ``crc_stored[b]`` before walking batch ``b``, so the walk finds
    the batch in cache (crc_kernel.py). A mismatch stops the scan with ``CRC_MISMATCH``.
    """
    r = 0
    check_crc = crc_from.shape[0] > 0
    headers_total = 0
    non_ascii = 0
    ko = 0
    vo = 0
    if copy:
        key_offsets[0] = 0
        value_offsets[0] = 0
    for b in range(starts.shape[0]):
        if check_crc and crc32c_range(buf, crc_from[b], crc_to[b]) != crc_stored[b]:
            return CRC_MISMATCH, b, headers_total, non_ascii
        pos = starts[b]
        end_of_batch = ends[b]
        for _ in range(counts[b]):
            length, pos = _varint(buf, pos, end_of_batch, 28)
            if pos < 0:
                return 9, b, headers_total, non_ascii
            end = pos + length
            if length < 0 or end > end_of_batch:
                return 1, b, headers_total, non_ascii
            pos += 1  # record attributes, unused since magic 2
            ts_delta, pos = _varint(buf, pos, end_of_batch, 63)
            if pos < 0:
                return 9, b, headers_total, non_ascii
            offset_delta, pos = _varint(buf, pos, end_of_batch, 28)
            if pos < 0:
                return 9, b, headers_total, non_ascii
            problem, pos, ko = _field(
                buf, pos, end, end_of_batch, r, key_pos, key_len, copy, key_data, key_offsets, ko, 2
            )
            if problem:
                return problem, b, headers_total, non_ascii
            problem, pos, vo = _field(
                buf, pos, end, end_of_batch, r, value_pos, value_len, copy, value_data, value_offsets, vo, 3
            )
            if problem:
                return problem, b, headers_total, non_ascii
            if copy:
                key_offsets[r + 1] = ko
                value_offsets[r + 1] = vo
            header_pos[r] = pos
            if pos < end and buf[pos] == 0:
                pos += 1
                header_count[r] = 0
            else:
                hcount, pos = _varint(buf, pos, end_of_batch, 28)
                if pos < 0:
                    return 9, b, headers_total, non_ascii
                if hcount < 0 or hcount > (end - pos) // 2:
                    return 4, b, headers_total, non_ascii
                for _h in range(hcount):
                    if pos >= end:
                        return 10, b, headers_total, non_ascii
                    hklen, pos = _varint(buf, pos, end_of_batch, 28)
                    if pos < 0:
                        return 9, b, headers_total, non_ascii
                    if hklen < 0 or pos + hklen > end:
                        return 5, b, headers_total, non_ascii
                    for i in range(pos, pos + hklen):
                        if buf[i] >= 0x80:
                            non_ascii = 1
                    pos += hklen
                    hvlen, pos = _varint(buf, pos, end_of_batch, 28)
                    if pos < 0:
                        return 9, b, headers_total, non_ascii
                    if hvlen >= 0:
                        if pos + hvlen > end:
                            return 6, b, headers_total, non_ascii
                        pos += hvlen
                header_count[r] = hcount
                headers_total += hcount
            if pos != end:
                return 7, b, headers_total, non_ascii
            offsets[r] = base_offsets[b] + offset_delta
            timestamps[r] = append_times[b] if append_times[b] >= 0 else base_timestamps[b] + ts_delta
            r += 1
        if pos != end_of_batch:
            return 8, b, headers_total, non_ascii
    return OK, -1, headers_total, non_ascii


# _field is inlined and the scan runs without Numba's reference counts (it allocates nothing): a compiled
# call per key and value, or the atomic counts of the arrays handed to the inlined one, made it 3 times
# slower.
scan_records = _jit(_scan_records, _nrt=False)


def _gather(buf: Any, positions: Any, lengths: Any, out_offsets: Any, out: Any) -> None:
    """Copy ``buf[positions[i]:positions[i] + lengths[i]]`` (nothing for a null, length < 0) to ``out``
    back to back; ``out_offsets`` (n + 1 entries, int32: Arrow's ``binary`` offsets) receives the
    offsets. The caller sizes ``out`` from ``lengths`` and checks every range lies in ``buf`` (the
    record scan did), since the copies are unchecked."""
    o = 0
    out_offsets[0] = 0
    for i in range(positions.shape[0]):
        n = lengths[i]
        if n > 0:
            _copy_bytes(out, o, buf, positions[i], n)
            o += n
        out_offsets[i + 1] = o


gather = _jit(_gather)


def _scan_headers(
    buf: Any, header_pos: Any, header_count: Any, hkey_pos: Any, hkey_len: Any, hval_pos: Any, hval_len: Any
) -> None:
    """Positions and lengths of every header of the given records (already validated by the scan)."""
    h = 0
    for r in range(header_pos.shape[0]):
        if header_count[r] == 0:
            continue
        pos = header_pos[r]
        _count, pos = _varint(buf, pos, buf.shape[0], 28)
        for _ in range(header_count[r]):
            klen, pos = _varint(buf, pos, buf.shape[0], 28)
            hkey_pos[h] = pos
            hkey_len[h] = klen
            pos += klen
            vlen, pos = _varint(buf, pos, buf.shape[0], 28)
            hval_pos[h] = pos
            hval_len[h] = vlen
            if vlen > 0:
                pos += vlen
            h += 1


scan_headers = _jit(_scan_headers)
