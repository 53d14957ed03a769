"""Validating a segment while its bytes stream past, for the copy path.

The copier reads a segment once, in chunks, and ships each chunk; :class:`BatchStreamValidator` is fed
the same chunks and checks every batch on the way (header sanity, CRC-32C, offsets strictly increasing
from batch to batch), so validation costs no second read. It keeps at most one batch header and a
running CRC, whatever the chunk or batch sizes. Chunks may split batches (and headers) anywhere.

Each ``feed`` returns the batches it completed, with their positions, which is what the remote index
builder needs; ``finish`` returns a summary and raises :class:`TruncatedTailError` if the data stopped
inside a batch.

The summary's ``chain_crc32c`` is the batch chain (:mod:`storage_core.formats.batch_chain`), the checksum the
remote tier records for a ``.log`` object: computing it here costs 21 bytes per batch instead of a second
CRC pass over the data.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.errors import CorruptDataError
from storage_core.formats.batch_chain import CHAIN_BYTES, chain_step
from storage_core.formats.crc import crc32c
from storage_core.formats.record_batch import CRC_START, HEADER_SIZE, BatchHeader, TruncatedTailError


@dataclass(frozen=True, slots=True)
class StreamSummary:
    """What a fully validated stream of batches contained."""

    batches: int
    records: int
    """Sum of the batches' ``recordsCount``."""
    start_position: int
    end_position: int
    first_offset: int | None
    last_offset: int | None
    max_timestamp: int | None
    """Largest batch ``maxTimestamp`` (what Kafka's time-based retention looks at)."""
    has_transactional: bool
    has_control: bool
    chain_crc32c: int
    """The batch chain of the stream (:mod:`storage_core.formats.batch_chain`)."""


class BatchStreamValidator:
    """Push parser that validates record batches as chunks of a segment arrive."""

    def __init__(self, *, start_position: int = 0, path: str | None = None) -> None:
        self._path = path
        self._start = start_position
        self._position = start_position
        self._batch_start = start_position
        self._head = bytearray()
        self._header: BatchHeader | None = None
        self._crc = 0
        self._chain = 0
        self._remaining = 0
        self._batches = 0
        self._records = 0
        self._first_offset: int | None = None
        self._last_offset: int | None = None
        self._max_timestamp: int | None = None
        self._transactional = False
        self._control = False

    @property
    def position(self) -> int:
        """Byte position just after the last byte fed."""
        return self._position

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
        """Validate the next chunk; return ``(position, header)`` of each batch completed in it.

        Raises ``CorruptDataError`` naming the offending batch's offset on a bad header or CRC.
        """
        view = memoryview(data).cast("B")
        done: list[tuple[int, BatchHeader]] = []
        i = 0
        n = len(view)
        while i < n:
            if self._header is None:
                if not self._head and n - i >= HEADER_SIZE:
                    header_bytes: bytes | bytearray | memoryview = view[i : i + HEADER_SIZE]
                    i += HEADER_SIZE
                else:
                    take = min(HEADER_SIZE - len(self._head), n - i)
                    self._head += view[i : i + take]
                    i += take
                    if len(self._head) < HEADER_SIZE:
                        break
                    header_bytes = bytes(self._head)
                self._start_batch(header_bytes)
            else:
                take = min(self._remaining, n - i)
                self._crc = crc32c(view[i : i + take], self._crc)
                self._remaining -= take
                i += take
            if self._header is not None and self._remaining == 0:
                done.append(self._end_batch())
        self._position += n
        return done

    def _start_batch(self, header_bytes: bytes | bytearray | memoryview) -> None:
        header = BatchHeader.parse(header_bytes, path=self._path, position=self._batch_start)
        if self._last_offset is not None and header.base_offset <= self._last_offset:
            raise CorruptDataError(
                f"record batch at byte {self._batch_start} starts at offset {header.base_offset}, "
                f"not after the previous batch's last offset {self._last_offset}",
                offset=header.base_offset,
                path=self._path,
            )
        self._header = header
        head = memoryview(header_bytes)
        self._chain = chain_step(head[:CHAIN_BYTES], self._chain)
        self._crc = crc32c(head[CRC_START:HEADER_SIZE])
        self._remaining = header.size_in_bytes - HEADER_SIZE
        self._head.clear()

    def _end_batch(self) -> tuple[int, BatchHeader]:
        header = self._header
        assert header is not None
        if self._crc != header.crc:
            raise CorruptDataError(
                f"record batch CRC mismatch at byte {self._batch_start}: stored {header.crc:#010x}, "
                f"computed {self._crc:#010x}",
                offset=header.base_offset,
                path=self._path,
            )
        position = self._batch_start
        self._batches += 1
        self._records += header.records_count
        if self._first_offset is None:
            self._first_offset = header.base_offset
        self._last_offset = header.last_offset
        if self._max_timestamp is None or header.max_timestamp > self._max_timestamp:
            self._max_timestamp = header.max_timestamp
        self._transactional |= header.is_transactional
        self._control |= header.is_control
        self._batch_start = position + header.size_in_bytes
        self._header = None
        return position, header

    def finish(self) -> StreamSummary:
        """Declare the end of the data; raise :class:`TruncatedTailError` if it ended inside a batch."""
        if self._header is not None or self._head:
            offset: int | None = None
            if self._header is not None:
                offset = self._header.base_offset
            elif len(self._head) >= 8:
                offset = int.from_bytes(self._head[:8], "big", signed=True)
            raise TruncatedTailError(
                f"data ends inside the record batch at byte {self._batch_start}",
                position=self._batch_start,
                offset=offset,
                path=self._path,
            )
        return StreamSummary(
            batches=self._batches,
            records=self._records,
            start_position=self._start,
            end_position=self._position,
            first_offset=self._first_offset,
            last_offset=self._last_offset,
            max_timestamp=self._max_timestamp,
            has_transactional=self._transactional,
            has_control=self._control,
            chain_crc32c=self._chain,
        )
