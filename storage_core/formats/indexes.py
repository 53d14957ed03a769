"""Kafka's per-segment index files: ``.index`` (offset -> byte position), ``.timeindex`` (timestamp ->
offset) and ``.txnindex`` (aborted transactions).

Layouts (big-endian)::

    .index      8-byte entries:  relativeOffset i32, position i32
    .timeindex  12-byte entries: timestamp i64, relativeOffset i32
    .txnindex   34-byte entries: version i16 (0), producerId i64, firstOffset i64, lastOffset i64,
                                 lastStableOffset i64

Offsets in ``.index``/``.timeindex`` are relative to the segment's base offset. The ``.index`` entry
points at the start of the batch whose *last* offset is the entry's offset. Both are sparse (an entry
per ``index.interval.bytes`` appended) and strictly increasing.

The zero-filled tail: Kafka preallocates both files to ``segment.index.bytes`` and keeps the entry count
in memory; the files are trimmed only when the segment rolls or the broker shuts down cleanly (Kafka
itself trusts the file length on load and rebuilds the indexes after an unclean shutdown). So the index
of an active segment read from outside the broker is a valid prefix followed by zeros. Readers here stop
at the first all-zero entry, found by binary search. That is exact: Kafka only indexes a batch after
more than ``index.interval.bytes`` were appended before it, so no real ``.index`` entry has position 0,
and ``.timeindex`` timestamps strictly increase from a non-negative start, so only slot 0 could
legitimately be all zeros, and reading it as "no entry" gives the same lookup answer.

``.txnindex`` is appended with ordinary writes, not preallocated.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, Self, TypeVar

from storage_core.errors import CorruptDataError
from storage_core.formats.source import (
    ByteSource,
    RangeFetcher,
    as_fetcher,
    bytes_fetcher,
    source_size,
)

NO_TIMESTAMP = -1
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")
TXN_ENTRY_SIZE = _TXN_ENTRY.size
TXN_INDEX_VERSION = 0
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True, order=True)
class OffsetPosition:
    """An ``.index`` entry with the offset made absolute."""

    offset: int
    position: int


@dataclass(frozen=True, slots=True, order=True)
class TimestampOffset:
    """A ``.timeindex`` entry with the offset made absolute."""

    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """A ``.txnindex`` entry: an aborted transaction's offset range and the LSO when it ended."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = TXN_INDEX_VERSION

    def encode(self) -> bytes:
        return _TXN_ENTRY.pack(
            self.version, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


E = TypeVar("E")


class _FixedSizeIndex(ABC, Generic[E]):
    """Entries of one fixed size, read through a fetcher; only the valid prefix is visible."""

    _entry: struct.Struct

    def __init__(
        self, fetch: RangeFetcher, base_offset: int, file_size: int, *, path: str | None = None
    ) -> None:
        self._fetch = fetch
        self.base_offset = base_offset
        self.path = path
        if file_size % self._entry.size:
            # Kafka rounds a preallocated size down to whole entries; a ragged length means damage.
            raise CorruptDataError(
                f"index size {file_size} is not a multiple of {self._entry.size}", path=path
            )
        self._slots = file_size // self._entry.size
        self._count: int | None = None

    @classmethod
    def open(
        cls, source: ByteSource, base_offset: int, *, size: int | None = None, path: str | None = None
    ) -> Self:
        """Index over a file object (size measured) or a fetcher (``size`` required)."""
        return cls(as_fetcher(source), base_offset, source_size(source, size), path=path)

    @classmethod
    def from_bytes(cls, data: bytes, base_offset: int, *, path: str | None = None) -> Self:
        return cls(bytes_fetcher(data), base_offset, len(data), path=path)

    def _raw(self, slot: int) -> bytes:
        size = self._entry.size
        data = self._fetch(slot * size, (slot + 1) * size)
        if len(data) != size:
            raise CorruptDataError(f"index entry {slot} is cut short", path=self.path)
        return data

    def _is_blank(self, slot: int) -> bool:
        return not any(self._raw(slot))

    def __len__(self) -> int:
        """Number of valid entries (the zero-filled tail excluded)."""
        if self._count is None:
            slots = self._slots
            if slots == 0 or not self._is_blank(slots - 1):
                self._count = slots
            else:
                lo, hi = 0, slots - 1  # the first blank slot lies in [lo, hi]
                while lo < hi:
                    mid = (lo + hi) // 2
                    if self._is_blank(mid):
                        hi = mid
                    else:
                        lo = mid + 1
                self._count = lo
        return self._count

    @property
    def is_preallocated(self) -> bool:
        """True when the file has a zero-filled tail (an active or uncleanly closed segment)."""
        return len(self) < self._slots

    @abstractmethod
    def _make(self, raw: tuple[int, int]) -> E:
        """The entry value for one unpacked slot."""

    def __getitem__(self, n: int) -> E:
        count = len(self)
        if n < 0:
            n += count
        if not 0 <= n < count:
            raise IndexError(f"index entry {n} out of range (entries: {count})")
        return self._make(self._entry.unpack(self._raw(n)))

    def __iter__(self) -> Iterator[E]:
        size = self._entry.size
        per_chunk = max(1, _READ_CHUNK // size)
        count = len(self)
        for first in range(0, count, per_chunk):
            last = min(count, first + per_chunk)
            data = self._fetch(first * size, last * size)
            if len(data) != (last - first) * size:
                raise CorruptDataError("index file is shorter than its entries", path=self.path)
            for raw in self._entry.iter_unpack(data):
                yield self._make(raw)

    def _floor_slot(self, key: int) -> int:
        """Slot of the last entry whose key (first field) is <= ``key``; -1 if none."""
        lo, hi = -1, len(self) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._entry.unpack(self._raw(mid))[0] <= key:
                lo = mid
            else:
                hi = mid - 1
        return lo


class OffsetIndex(_FixedSizeIndex[OffsetPosition]):
    """A ``.index`` file. Keys are stored relative; everything returned is absolute."""

    _entry = _OFFSET_ENTRY

    def _make(self, raw: tuple[int, int]) -> OffsetPosition:
        return OffsetPosition(self.base_offset + raw[0], raw[1])

    def lookup(self, offset: int) -> OffsetPosition:
        """The last entry with offset <= ``offset``, or ``(base_offset, 0)``: where to start scanning."""
        slot = self._floor_slot(offset - self.base_offset)
        return OffsetPosition(self.base_offset, 0) if slot < 0 else self[slot]

    def validate(self, log_size: int | None = None) -> None:
        """Check entries strictly increase and point inside the log; raise ``CorruptDataError`` if not."""
        previous: OffsetPosition | None = None
        for entry in self:
            if entry.offset < self.base_offset or (log_size is not None and entry.position >= log_size):
                raise CorruptDataError(f"offset index entry {entry} is outside its segment", path=self.path)
            if previous is not None and (
                entry.offset <= previous.offset or entry.position <= previous.position
            ):
                raise CorruptDataError(
                    f"offset index entries do not increase: {previous} then {entry}",
                    offset=entry.offset,
                    path=self.path,
                )
            previous = entry


class TimeIndex(_FixedSizeIndex[TimestampOffset]):
    """A ``.timeindex`` file: entry ``(T, O)`` means no record before offset O has a timestamp above T."""

    _entry = _TIME_ENTRY

    def _make(self, raw: tuple[int, int]) -> TimestampOffset:
        return TimestampOffset(raw[0], self.base_offset + raw[1])

    def lookup(self, timestamp: int) -> TimestampOffset:
        """The last entry with timestamp <= ``timestamp``, or ``(-1, base_offset)`` (Kafka's answer)."""
        slot = self._floor_slot(timestamp)
        return TimestampOffset(NO_TIMESTAMP, self.base_offset) if slot < 0 else self[slot]

    def validate(self) -> None:
        """Check timestamps strictly increase and offsets never decrease; raise ``CorruptDataError``."""
        previous: TimestampOffset | None = None
        for entry in self:
            if entry.offset < self.base_offset:
                raise CorruptDataError(f"time index entry {entry} is before its segment", path=self.path)
            if previous is not None and (
                entry.timestamp <= previous.timestamp or entry.offset < previous.offset
            ):
                raise CorruptDataError(
                    f"time index entries do not increase: {previous} then {entry}",
                    offset=entry.offset,
                    path=self.path,
                )
            previous = entry


def encode_offset_index(entries: Iterable[OffsetPosition], base_offset: int) -> bytes:
    """Bytes of a trimmed ``.index`` file holding ``entries``."""
    return b"".join(_OFFSET_ENTRY.pack(_relative(e.offset, base_offset), e.position) for e in entries)


def encode_time_index(entries: Iterable[TimestampOffset], base_offset: int) -> bytes:
    """Bytes of a trimmed ``.timeindex`` file holding ``entries``."""
    return b"".join(_TIME_ENTRY.pack(e.timestamp, _relative(e.offset, base_offset)) for e in entries)


def _relative(offset: int, base_offset: int) -> int:
    relative = offset - base_offset
    if not 0 <= relative <= 0x7FFFFFFF:
        raise ValueError(f"offset {offset} cannot be stored relative to base offset {base_offset}")
    return relative


def iter_txn_index(source: ByteSource, *, path: str | None = None) -> Iterator[AbortedTxn]:
    """Entries of a ``.txnindex`` file in order.

    Raises ``CorruptDataError`` on a partial entry or an unknown entry version.
    """
    fetch = as_fetcher(source)
    per_chunk = _READ_CHUNK // TXN_ENTRY_SIZE * TXN_ENTRY_SIZE
    pos = 0
    while True:
        data = fetch(pos, pos + per_chunk)
        whole = len(data) // TXN_ENTRY_SIZE * TXN_ENTRY_SIZE
        for version, producer_id, first, last, lso in _TXN_ENTRY.iter_unpack(data[:whole]):
            if version != TXN_INDEX_VERSION:
                raise CorruptDataError(f"transaction index entry has unknown version {version}", path=path)
            yield AbortedTxn(producer_id, first, last, lso, version)
        if whole != len(data):
            raise CorruptDataError(
                f"transaction index ends with a partial {len(data) - whole}-byte entry", path=path
            )
        if len(data) < per_chunk:
            return
        pos += len(data)


def encode_txn_index(entries: Iterable[AbortedTxn]) -> bytes:
    """Bytes of a ``.txnindex`` file holding ``entries``."""
    return b"".join(entry.encode() for entry in entries)
