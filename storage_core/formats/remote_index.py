"""The remote index files of KIP-405's design: ``remoteLogIndex``, ``remoteOffsetIndex`` and
``remoteTimeIndex``, which let a reader find the byte range of a remote segment holding an offset or a
timestamp with a couple of small reads.

remoteLogIndex: a sequence of variable-length entries, each describing a run of consecutive batches
stored contiguously in one remote object (big-endian)::

    magic          i16   0
    length         i16   bytes of the whole entry, magic through rdi (46 + rdiLength), so a reader can
                         step over an entry from its first four bytes and a torn entry is detected
    crc            i32   CRC-32C (the Kafka batch checksum) of the entry from firstOffset to its end,
                         stored as the unsigned value's bit pattern
    firstOffset    i64   base offset of the first batch
    lastOffset     i64   last offset of the last batch
    firstTimestamp i64   the first record's timestamp as far as its batch header tells (baseTimestamp
                         for CreateTime batches, maxTimestamp for LogAppendTime ones and for batches
                         the log cleaner re-based on a delete horizon)
    lastTimestamp  i64   the largest batch maxTimestamp among the entry's batches
    dataLength     i32   bytes of the batches
    rdiLength      i16   bytes of rdi
    rdi            bytes remote data identifier: UTF-8 ``<object name>@<byte position>``, the object
                         holding the batches and where in it they start (see :class:`RemoteDataId`)

remoteOffsetIndex: 12-byte entries ``firstOffset i64, position i32``, one per remoteLogIndex entry, the
position being that entry's byte position in the remoteLogIndex file. Offsets are absolute, since one
set of remote indexes may span segments. Lookup: the last entry whose firstOffset <= the target.

remoteTimeIndex: 12-byte entries ``timestamp i64, position i32``, written each time the running maximum
of lastTimestamp grows, keyed by the new maximum. So every remoteLogIndex entry before an index entry's
position has lastTimestamp below its key; the first entry with key >= T therefore points at the first
remoteLogIndex entry that can hold a record with timestamp >= T (what ListOffsets-by-time needs).

:class:`RemoteIndexBuilder` groups a segment's batches into entries of about ``target_entry_bytes``
(default 1 MiB; a larger batch gets an entry of its own) and produces all three files.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from storage_core.errors import CorruptDataError
from storage_core.formats.crc import crc32c
from storage_core.formats.record_batch import BatchHeader
from storage_core.formats.source import (
    ByteSource,
    ChunkCursor,
    RangeFetcher,
    as_fetcher,
    bytes_fetcher,
    source_size,
)

REMOTE_LOG_INDEX_MAGIC = 0
_PREFIX = struct.Struct(">hhI")
_BODY = struct.Struct(">qqqqih")
FIXED_ENTRY_SIZE = _PREFIX.size + _BODY.size
MAX_ENTRY_SIZE = 0x7FFF
MAX_RDI_SIZE = MAX_ENTRY_SIZE - FIXED_ENTRY_SIZE
_CRC_FROM = _PREFIX.size
_POINTER = struct.Struct(">qi")
POINTER_SIZE = _POINTER.size
DEFAULT_TARGET_ENTRY_BYTES = 1 << 20
_MAX_POSITION = 0x7FFFFFFF
_SPECULATIVE_READ = 256


@dataclass(frozen=True, slots=True)
class RemoteDataId:
    """Where an entry's batches live: an object name and a byte position in it.

    Encoded as UTF-8 ``<object name>@<position>``; decoding splits at the last ``@`` so object names may
    contain ``@`` themselves.
    """

    object_name: str
    position: int

    def encode(self) -> bytes:
        if self.position < 0:
            raise ValueError(f"negative position {self.position}")
        return f"{self.object_name}@{self.position}".encode()

    @classmethod
    def decode(cls, raw: bytes) -> RemoteDataId:
        try:
            name, sep, position = raw.decode("utf-8").rpartition("@")
        except UnicodeDecodeError:
            raise ValueError("remote data id is not UTF-8") from None
        if not sep or not position.isdigit() or not position.isascii():
            raise ValueError(f"remote data id {raw!r} is not <object>@<position>")
        return cls(name, int(position))


@dataclass(frozen=True, slots=True)
class RemoteLogIndexEntry:
    """One remoteLogIndex entry (see the module docstring for the byte layout)."""

    first_offset: int
    last_offset: int
    first_timestamp: int
    last_timestamp: int
    data_length: int
    rdi: bytes

    @property
    def size(self) -> int:
        return FIXED_ENTRY_SIZE + len(self.rdi)

    @property
    def data_id(self) -> RemoteDataId:
        """The decoded rdi (``CorruptDataError`` naming the entry's first offset if it is not in our
        format)."""
        return self.locate()

    def locate(self, path: str | None = None) -> RemoteDataId:
        """The decoded rdi; ``CorruptDataError`` naming ``path`` (the index object) and the entry's first
        offset when it is not in our format, so a damaged entry is reported in one line, not a traceback."""
        try:
            return RemoteDataId.decode(self.rdi)
        except ValueError as exc:
            raise CorruptDataError(
                f"remote log index entry: {exc}", offset=self.first_offset, path=path
            ) from None

    def encode(self) -> bytes:
        if len(self.rdi) > MAX_RDI_SIZE:
            raise ValueError(f"rdi of {len(self.rdi)} bytes exceeds {MAX_RDI_SIZE}")
        if self.last_offset < self.first_offset or not 0 <= self.data_length <= _MAX_POSITION:
            raise ValueError(f"inconsistent remote log index entry {self}")
        body = (
            _BODY.pack(
                self.first_offset,
                self.last_offset,
                self.first_timestamp,
                self.last_timestamp,
                self.data_length,
                len(self.rdi),
            )
            + self.rdi
        )
        return _PREFIX.pack(REMOTE_LOG_INDEX_MAGIC, self.size, crc32c(body)) + body

    @classmethod
    def decode(
        cls, buf: bytes | memoryview, pos: int = 0, *, path: str | None = None, position: int | None = None
    ) -> RemoteLogIndexEntry:
        """Decode and verify (magic, lengths, CRC) the entry at ``buf[pos:]``.

        ``position`` (the entry's position in its file) is used in error messages only.
        """
        where = f" at byte {position if position is not None else pos}"
        if len(buf) - pos < FIXED_ENTRY_SIZE:
            raise CorruptDataError(f"remote log index entry{where} is cut short", path=path)
        magic, length, stored_crc = _PREFIX.unpack_from(buf, pos)
        if magic != REMOTE_LOG_INDEX_MAGIC:
            raise CorruptDataError(f"remote log index entry{where} has unknown magic {magic}", path=path)
        if length < FIXED_ENTRY_SIZE or len(buf) - pos < length:
            raise CorruptDataError(f"remote log index entry{where} has bad length {length}", path=path)
        first, last, first_ts, last_ts, data_length, rdi_length = _BODY.unpack_from(buf, pos + _PREFIX.size)
        if FIXED_ENTRY_SIZE + rdi_length != length:
            raise CorruptDataError(
                f"remote log index entry{where}: length {length} disagrees with rdiLength {rdi_length}",
                offset=first,
                path=path,
            )
        actual_crc = crc32c(memoryview(buf)[pos + _CRC_FROM : pos + length])
        if actual_crc != stored_crc:
            problem = f"CRC mismatch: stored {stored_crc:#010x}, computed {actual_crc:#010x}"
            raise CorruptDataError(f"remote log index entry{where} {problem}", offset=first, path=path)
        rdi = bytes(buf[pos + FIXED_ENTRY_SIZE : pos + length])
        return cls(first, last, first_ts, last_ts, data_length, rdi)


def read_remote_log_entry(
    source: ByteSource, position: int, *, path: str | None = None
) -> RemoteLogIndexEntry:
    """The entry at ``position`` of a remoteLogIndex file (usually one small fetch)."""
    fetch = as_fetcher(source)
    data = fetch(position, position + _SPECULATIVE_READ)
    if len(data) >= _PREFIX.size:
        (length,) = struct.unpack_from(">h", data, 2)
        if length >= FIXED_ENTRY_SIZE and len(data) < length:
            data += fetch(position + len(data), position + length)
    return RemoteLogIndexEntry.decode(data, path=path, position=position)


def iter_remote_log_index(
    source: ByteSource, start_position: int = 0, *, path: str | None = None
) -> Iterator[tuple[int, RemoteLogIndexEntry]]:
    """``(position, entry)`` for each entry from ``start_position`` to the end, verified, read in chunks."""
    cursor = ChunkCursor(as_fetcher(source), start_position, 1 << 16)
    pos = start_position
    while True:
        prefix = cursor.take(pos, pos + _PREFIX.size)
        if not prefix:
            return
        if len(prefix) < _PREFIX.size:
            raise CorruptDataError(f"remote log index ends inside an entry at byte {pos}", path=path)
        (length,) = struct.unpack_from(">h", prefix, 2)
        data = cursor.take(pos, pos + max(length, FIXED_ENTRY_SIZE))
        entry = RemoteLogIndexEntry.decode(data, path=path, position=pos)
        yield pos, entry
        pos += entry.size


@dataclass(frozen=True, slots=True, order=True)
class RemotePointer:
    """A remoteOffsetIndex/remoteTimeIndex entry: a key (offset or timestamp) and the byte position of
    a remoteLogIndex entry."""

    key: int
    position: int


class RemotePointerIndex:
    """A remoteOffsetIndex or remoteTimeIndex file, searched in place through a fetcher."""

    def __init__(self, fetch: RangeFetcher, size: int, *, path: str | None = None) -> None:
        if size % POINTER_SIZE:
            raise CorruptDataError(f"remote index size {size} is not a multiple of {POINTER_SIZE}", path=path)
        self._fetch = fetch
        self._count = size // POINTER_SIZE
        self.path = path

    @classmethod
    def open(
        cls, source: ByteSource, *, size: int | None = None, path: str | None = None
    ) -> RemotePointerIndex:
        """Index over a file object (size measured) or a fetcher (``size`` required)."""
        return cls(as_fetcher(source), source_size(source, size), path=path)

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str | None = None) -> RemotePointerIndex:
        return cls(bytes_fetcher(data), len(data), path=path)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, n: int) -> RemotePointer:
        if n < 0:
            n += self._count
        if not 0 <= n < self._count:
            raise IndexError(f"remote index entry {n} out of range (entries: {self._count})")
        data = self._fetch(n * POINTER_SIZE, (n + 1) * POINTER_SIZE)
        if len(data) != POINTER_SIZE:
            raise CorruptDataError(f"remote index entry {n} is cut short", path=self.path)
        return RemotePointer(*_POINTER.unpack(data))

    def __iter__(self) -> Iterator[RemotePointer]:
        data = self._fetch(0, self._count * POINTER_SIZE)
        if len(data) != self._count * POINTER_SIZE:
            raise CorruptDataError("remote index is shorter than its entries", path=self.path)
        for key, position in _POINTER.iter_unpack(data):
            yield RemotePointer(key, position)

    def floor(self, key: int) -> RemotePointer | None:
        """The last entry with key <= ``key`` (binary search), or None."""
        lo, hi = -1, self._count - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self[mid].key <= key:
                lo = mid
            else:
                hi = mid - 1
        return None if lo < 0 else self[lo]

    def ceiling(self, key: int) -> RemotePointer | None:
        """The first entry with key >= ``key`` (binary search), or None."""
        lo, hi = 0, self._count
        while lo < hi:
            mid = (lo + hi) // 2
            if self[mid].key < key:
                lo = mid + 1
            else:
                hi = mid
        return None if lo >= self._count else self[lo]

    def validate(self) -> None:
        """Check keys and positions strictly increase; ``CorruptDataError`` if not."""
        previous: RemotePointer | None = None
        for pointer in self:
            if previous is not None and (
                pointer.key <= previous.key or pointer.position <= previous.position
            ):
                problem = f"remote index entries do not increase: {previous} then {pointer}"
                raise CorruptDataError(problem, path=self.path)
            previous = pointer


def position_for_offset(offset_index: RemotePointerIndex, offset: int) -> int | None:
    """remoteLogIndex position to start reading ``offset`` from: the last entry starting at or before it
    or, below the first entry, the first entry; None for an empty index. An offset past the indexed data
    also lands on the last entry, so callers compare with the entry's lastOffset."""
    pointer = offset_index.floor(offset)
    if pointer is None:
        return offset_index[0].position if len(offset_index) else None
    return pointer.position


def position_for_timestamp(time_index: RemotePointerIndex, timestamp: int) -> int | None:
    """remoteLogIndex position of the first entry that may hold a record with timestamp >= ``timestamp``;
    None when no record in the indexed data is that late."""
    pointer = time_index.ceiling(timestamp)
    return None if pointer is None else pointer.position


@dataclass(frozen=True, slots=True)
class RemoteIndexFiles:
    """The bytes of the three remote index files."""

    log_index: bytes
    offset_index: bytes
    time_index: bytes


class RemoteIndexBuilder:
    """Builds the three remote index files from batches as they are validated, in offset order.

    Feed ``add_batch`` with every batch of one or more segments (object by object); a new entry starts
    when the current one would exceed ``target_entry_bytes``, when the object changes, or when batches
    are not contiguous. ``start_position`` lets new entries be appended to an existing remoteLogIndex.
    """

    def __init__(
        self,
        *,
        target_entry_bytes: int = DEFAULT_TARGET_ENTRY_BYTES,
        start_position: int = 0,
        max_timestamp_so_far: int | None = None,
        last_offset_so_far: int | None = None,
    ) -> None:
        if target_entry_bytes <= 0:
            raise ValueError("target_entry_bytes must be positive")
        self._target = target_entry_bytes
        self._log = bytearray()
        self._offsets = bytearray()
        self._times = bytearray()
        self._next_position = start_position
        self._max_ts = max_timestamp_so_far
        self._last_offset = last_offset_so_far
        self._last_entry_offset = last_offset_so_far
        self._group: list[BatchHeader] = []
        self._group_object = ""
        self._group_start = 0
        self._group_end = 0
        self.entries: list[tuple[int, RemoteLogIndexEntry]] = []
        """``(position, entry)`` of every entry written so far."""

    def add_batch(self, object_name: str, position: int, header: BatchHeader) -> None:
        """Add the batch at byte ``position`` of object ``object_name``."""
        if self._last_offset is not None and header.base_offset <= self._last_offset:
            raise ValueError(
                f"batch at offset {header.base_offset} does not follow offset {self._last_offset}"
            )
        if self._group and (
            object_name != self._group_object
            or position != self._group_end
            or self._group_end - self._group_start + header.size_in_bytes > self._target
        ):
            self._close_group()
        if not self._group:
            self._group_object = object_name
            self._group_start = position
        self._group.append(header)
        self._group_end = position + header.size_in_bytes
        self._last_offset = header.last_offset

    def add_entry(self, entry: RemoteLogIndexEntry) -> int:
        """Append a ready-made entry (e.g. one read back from a remote file); return its position."""
        self._close_group()
        if self._last_entry_offset is not None and entry.first_offset <= self._last_entry_offset:
            raise ValueError(
                f"entry at offset {entry.first_offset} does not follow offset {self._last_entry_offset}"
            )
        self._last_offset = entry.last_offset
        return self._append(entry)

    def _append(self, entry: RemoteLogIndexEntry) -> int:
        position = self._next_position
        if position > _MAX_POSITION:
            raise ValueError("remote log index grew past 2 GiB")
        self._log += entry.encode()
        self._offsets += _POINTER.pack(entry.first_offset, position)
        if self._max_ts is None or entry.last_timestamp > self._max_ts:
            self._max_ts = entry.last_timestamp
            self._times += _POINTER.pack(entry.last_timestamp, position)
        self._next_position += entry.size
        self._last_entry_offset = entry.last_offset
        self.entries.append((position, entry))
        return position

    def _close_group(self) -> None:
        if not self._group:
            return
        group, self._group = self._group, []
        entry = RemoteLogIndexEntry(
            first_offset=group[0].base_offset,
            last_offset=group[-1].last_offset,
            first_timestamp=group[0].first_record_timestamp,
            last_timestamp=max(h.max_timestamp for h in group),
            data_length=self._group_end - self._group_start,
            rdi=RemoteDataId(self._group_object, self._group_start).encode(),
        )
        self._append(entry)

    def finish(self) -> RemoteIndexFiles:
        """Close the open entry and return the files (the builder can keep going afterwards)."""
        self._close_group()
        return RemoteIndexFiles(bytes(self._log), bytes(self._offsets), bytes(self._times))


def build_remote_indexes(
    batches: Iterable[tuple[int, BatchHeader]],
    object_name: str,
    *,
    target_entry_bytes: int = DEFAULT_TARGET_ENTRY_BYTES,
) -> RemoteIndexFiles:
    """The remote index files of one segment object from its ``(position, header)`` pairs."""
    builder = RemoteIndexBuilder(target_entry_bytes=target_entry_bytes)
    for position, header in batches:
        builder.add_batch(object_name, position, header)
    return builder.finish()


def rebuild_pointer_indexes(log_index: ByteSource, *, path: str | None = None) -> RemoteIndexFiles:
    """Re-derive remoteOffsetIndex and remoteTimeIndex from a remoteLogIndex alone (verifying it)."""
    builder = RemoteIndexBuilder()
    for _, entry in iter_remote_log_index(log_index, path=path):
        builder.add_entry(entry)
    return builder.finish()
