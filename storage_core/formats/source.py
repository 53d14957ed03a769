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
from collections.abc import Callable
from typing import BinaryIO

RangeFetcher = Callable[[int, int], bytes]
"""``fetch(start, end)`` returns the bytes of ``[start, end)``, shorter only at the end of the data."""

ByteSource = BinaryIO | RangeFetcher
"""What readers accept: a seekable binary file object or a :data:`RangeFetcher`."""


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
                chunk = os.pread(real_fd, want, start)
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
            chunk = fileobj.read(want)
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

    Memory is about one chunk plus the largest range taken. Ranges must not start before the previous
    one did (the cursor only moves forward).
    """

    def __init__(self, fetch: RangeFetcher, position: int = 0, chunk_size: int = 1 << 20) -> None:
        self._fetch = fetch
        self._chunk_size = chunk_size
        self._buf = b""
        self._buf_start = position

    def take(self, start: int, end: int) -> bytes:
        """Bytes of ``[start, end)``, shorter only at the end of the data."""
        offset = start - self._buf_start
        if offset < 0:
            raise ValueError(f"cursor at {self._buf_start} cannot move back to {start}")
        if end - self._buf_start > len(self._buf):
            keep = self._buf[offset:] if offset < len(self._buf) else b""
            fetch_from = start + len(keep)
            more = self._fetch(fetch_from, max(end, fetch_from + self._chunk_size))
            self._buf = keep + more
            self._buf_start = start
            offset = 0
        return self._buf[offset : offset + (end - start)]
