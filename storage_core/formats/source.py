"""Where format readers get their bytes: a range fetcher, ``(start, end) -> bytes``.

Every reader in this package takes either a binary file object or a fetcher, so the same parsing code
serves a local log dir, an in-memory buffer in a test and a remote object behind a read-ahead or block
cache (the caching policy is the caller's choice, see ``storage_core.fetchers``).

Contract of a fetcher: return the bytes in ``[start, end)``; return fewer only when the data ends before
``end`` (an empty result means ``start`` is at or past the end). Readers rely on a short read to detect
the end of a file, which is how they tell a partial trailing batch from a complete one.
"""

from __future__ import annotations

import io
import os
from collections import deque
from collections.abc import Callable
from typing import BinaryIO

RangeFetcher = Callable[[int, int], bytes]
"""``fetch(start, end)`` returns the bytes of ``[start, end)``, shorter only at the end of the data."""

ByteSource = BinaryIO | RangeFetcher
"""What readers accept: a seekable binary file object or a :data:`RangeFetcher`."""

MAX_READ = 8 << 20
"""Largest single read a file fetcher makes. ``os.pread(fd, n)`` and ``file.read(n)`` allocate ``n`` bytes
before they know how many there are, and ``end`` often comes from an untrusted length field (a batch
header claiming 2 GiB); reading in steps bounds the memory by the bytes that exist."""

ViewFetcher = Callable[[int, int], bytes | memoryview]
"""A fetcher that may answer with views instead of copies (e.g. of a mapped file). Only
:class:`ChunkCursor`, and so :func:`~storage_core.formats.record_batch.iter_batches`, take one."""


def bytes_fetcher(data: bytes | bytearray | memoryview) -> RangeFetcher:
    """A fetcher over an in-memory buffer."""
    view = memoryview(data)

    def fetch(start: int, end: int) -> bytes:
        return bytes(view[start:end])

    return fetch


def file_fetcher(fileobj: BinaryIO) -> RangeFetcher:
    """A fetcher over a seekable binary file object.

    Real files are read with ``os.pread`` so the file position is left alone and concurrent fetches from
    read-ahead threads do not race on it; other file objects (``BytesIO``, fsspec files) seek and read.
    """
    fd: int | None
    try:
        fd = fileobj.fileno()
    except (OSError, AttributeError, io.UnsupportedOperation):
        fd = None
    if fd is not None and hasattr(os, "pread"):
        real_fd = fd

        def pread(start: int, end: int) -> bytes:
            if end <= start:
                return b""
            parts: list[bytes] = []
            want = end - start
            while want > 0:
                chunk = os.pread(real_fd, min(want, MAX_READ), start)
                if not chunk:
                    break
                parts.append(chunk)
                start += len(chunk)
                want -= len(chunk)
            return parts[0] if len(parts) == 1 else b"".join(parts)

        return pread

    def seek_read(start: int, end: int) -> bytes:
        if end <= start:
            return b""
        fileobj.seek(start)
        parts: list[bytes] = []
        want = end - start
        while want > 0:
            chunk = fileobj.read(min(want, MAX_READ))
            if not chunk:
                break
            parts.append(bytes(chunk))
            want -= len(chunk)
        return b"".join(parts)

    return seek_read


def source_size(source: ByteSource, size: int | None = None) -> int:
    """``size`` if given, else the length of a file object (a fetcher cannot be measured)."""
    if size is not None:
        return size
    if callable(source):
        raise ValueError("the size of fetcher-backed data must be given")
    try:
        return os.fstat(source.fileno()).st_size
    except (OSError, AttributeError, io.UnsupportedOperation):
        current = source.tell()
        end = source.seek(0, io.SEEK_END)
        source.seek(current)
        return end


def as_fetcher(source: ByteSource) -> RangeFetcher:
    """Normalise a file object or a fetcher into a fetcher."""
    if callable(source):
        return source
    return file_fetcher(source)


class ChunkCursor:
    """Serves exact byte ranges out of large sequential fetches, so small records cost no extra calls.

    Fetched chunks are kept as they arrive and a range is cut out of them directly: a range inside one
    chunk is a view of it (:meth:`view`) or a copy of just its bytes (:meth:`take`), and no chunk is ever
    re-copied to join it to the next. Memory
    is about one chunk plus the largest range taken. Ranges must not start before the previous one did
    (the cursor only moves forward).
    """

    def __init__(self, fetch: ViewFetcher, position: int = 0, chunk_size: int = 1 << 20) -> None:
        self._fetch = fetch
        self._chunk_size = chunk_size
        self._chunks: deque[bytes | memoryview] = deque()
        self._start = position  # where the first kept chunk starts
        self._end = position  # where the last kept chunk ends
        self._exhausted = False

    def take(self, start: int, end: int) -> bytes:
        """Bytes of ``[start, end)``, shorter only at the end of the data."""
        data = self.view(start, end)
        return data if isinstance(data, bytes) else bytes(data)

    def view(self, start: int, end: int) -> bytes | memoryview:
        """Like :meth:`take`, without copying when the range lies inside one fetched chunk.

        The memoryview keeps its whole chunk alive; convert it to bytes before holding it for long.
        """
        if start < self._start:
            raise ValueError(f"cursor at {self._start} cannot move back to {start}")
        while self._chunks and self._start + len(self._chunks[0]) <= start:
            self._start += len(self._chunks.popleft())
        if not self._chunks:
            self._start = self._end = max(self._end, start)
        while self._end < end and not self._exhausted:
            more = self._fetch(self._end, max(end, self._end + self._chunk_size))
            if not more:
                self._exhausted = True
                break
            self._chunks.append(more)
            self._end += len(more)
        end = min(end, self._end)
        if end <= start:
            return b""
        first = self._chunks[0]
        offset = start - self._start
        if offset + (end - start) <= len(first):
            return memoryview(first)[offset : offset + (end - start)]
        # Views, so a range spanning chunks is copied once (by join), not sliced and then joined.
        parts = []
        position = self._start
        for chunk in self._chunks:
            if position >= end:
                break
            parts.append(memoryview(chunk)[max(start - position, 0) : end - position])
            position += len(chunk)
        return b"".join(parts)
