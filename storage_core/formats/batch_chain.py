"""The batch chain: the checksum the remote tier records for a ``.log`` object, and its fast checker.

The chain is the CRC-32C of the first ``CRC_START`` (21) bytes of every record batch of the object, in
order: base offset, batch length, partition leader epoch, magic and the batch's own CRC-32C, which covers
the rest of the batch. An object whose batches all match their CRCs and whose chain matches the recorded
one is verified byte for byte, as a whole-object checksum would verify it, and a copier that checks every
batch's CRC anyway gets the chain for 21 bytes per batch instead of a second CRC pass over the data.
:class:`~storage_core.formats.batch_stream.BatchStreamValidator` computes it while it validates a segment
for the copy; :class:`BatchChainCheck` verifies a download against it with as little per-batch work as
possible (restores move whole segments of batches that may be small).
"""

from __future__ import annotations

import struct

from storage_core.errors import CorruptDataError
from storage_core.formats.crc import crc32c, raw_crc32c
from storage_core.formats.record_batch import (
    CRC_START,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    TruncatedTailError,
    framing_problem,
)

CHAIN_BYTES = CRC_START
"""Bytes of each batch that go into the chain."""

_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc


def chain_step(prefix: bytes | bytearray | memoryview, chain: int) -> int:
    """The chain after one more batch whose first ``CHAIN_BYTES`` bytes are ``prefix``."""
    return crc32c(prefix, chain)


class BatchChainCheck:
    """Checks bytes of a ``.log`` object as they arrive, in chunks cut anywhere: every batch's framing and
    CRC-32C on the way, the chain at :meth:`finish`.

    Unlike the copy's validator it builds no header objects and keeps no offsets, so it costs about one
    struct unpack and two CRC calls per batch. Memory: at most one batch that straddles two chunks.
    """

    def __init__(self, *, path: str | None = None) -> None:
        self._path = path
        self._chain = 0
        self._carry = bytearray()
        self._position = 0
        """Object position of the first byte not yet part of a checked batch (the carry's start)."""

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        start = 0
        if self._carry:
            start = self._fill_carry(view)
            if self._carry:
                return  # the chunk ended inside the carried batch
        end = self._scan(view, start)
        self._carry += view[end:]

    def finish(self, expected: int | None = None) -> int:
        """Declare the end of the object; return the chain, after comparing it with ``expected`` if given."""
        if self._carry:
            raise TruncatedTailError(
                f"data ends inside the record batch at byte {self._position}",
                position=self._position,
                offset=self._carry_offset(),
                path=self._path,
            )
        if expected is not None and self._chain != expected:
            raise CorruptDataError(
                f"batch chain CRC-32C {self._chain:#010x} differs from the {expected:#010x} "
                "recorded when the object was written",
                path=self._path,
            )
        return self._chain

    def _scan(self, view: memoryview, pos: int) -> int:
        """Check every whole batch in ``view[pos:]``; return where the first incomplete one starts."""
        # One loop with everything inlined: this runs once per batch, and batches can be a few hundred bytes.
        n = len(view)
        chain = self._chain
        unpack, crc = _PREFIX.unpack_from, raw_crc32c
        first = pos
        try:
            while n - pos >= CHAIN_BYTES:
                base_offset, length, _epoch, magic, stored = unpack(view, pos)
                if magic != MAGIC_V2 or length < MIN_BATCH_LENGTH:
                    raise self._framing_error(base_offset, length, magic, self._position + pos - first)
                end = pos + LOG_OVERHEAD + length
                if end > n:
                    break
                chain = crc(view[pos : pos + CHAIN_BYTES], chain)
                computed = crc(view[pos + CRC_START : end], 0)
                if computed != stored:
                    raise CorruptDataError(
                        f"record batch CRC mismatch at byte {self._position + pos - first}: stored "
                        f"{stored:#010x}, "
                        f"computed {computed:#010x}",
                        offset=base_offset,
                        path=self._path,
                    )
                pos = end
        finally:
            self._chain = chain
            self._position += pos - first
        return pos

    def _fill_carry(self, view: memoryview) -> int:
        """Move bytes of ``view`` into the carried batch until it is whole, and check it; return the bytes
        of ``view`` used."""
        carry = self._carry
        used = min(max(CHAIN_BYTES - len(carry), 0), len(view))
        carry += view[:used]
        if len(carry) < CHAIN_BYTES:
            return used
        base_offset, length, _epoch, magic, _crc = _PREFIX.unpack_from(carry, 0)
        if magic != MAGIC_V2 or length < MIN_BATCH_LENGTH:
            raise self._framing_error(base_offset, length, magic, self._position)
        take: int = min(LOG_OVERHEAD + length - len(carry), len(view) - used)
        carry += view[used : used + take]
        used += take
        if len(carry) == LOG_OVERHEAD + length:
            self._scan(memoryview(carry), 0)
            carry.clear()
        return used

    def _framing_error(self, base_offset: int, length: int, magic: int, position: int) -> CorruptDataError:
        return CorruptDataError(
            f"{framing_problem(magic, length)} at byte {position}", offset=base_offset, path=self._path
        )

    def _carry_offset(self) -> int | None:
        return int.from_bytes(self._carry[:8], "big", signed=True) if len(self._carry) >= 8 else None
