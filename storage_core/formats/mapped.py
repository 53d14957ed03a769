"""A memory-mapped local file as a range fetcher, for scans that should not copy their bytes.

Reading a file with ``read`` copies every byte out of the page cache; a scan that only checks batches
(CRC, headers) can look at the page cache directly instead. :class:`MappedFile` maps the file once and
serves ranges as views of the mapping, so the only pass over the bytes is the check itself.

Only for files nobody truncates while they are mapped: touching a mapped page beyond a shrunk file's
end kills the process with SIGBUS. Remote-tier objects qualify (written once under a unique name, only
ever deleted, and a deleted file stays readable while mapped); a live Kafka segment does not.

Resident memory is the caller's to bound: :meth:`MappedFile.release_before` drops the pages behind a scan
from this process's page tables (``MADV_DONTNEED``; the page cache keeps them, and a view still held
behind the scan reads the same bytes again on its next access).
"""

from __future__ import annotations

import mmap
import os
from typing import BinaryIO

RELEASE_STEP = 32 << 20
"""Pages are released in steps of at least this many bytes: one system call per step, not per batch."""


class MappedFile:
    """``[start, end)`` of a file as views of one read-only mapping; a :data:`~.source.ViewFetcher`.

    ``size`` bounds the mapping (default, and at most: the file's length now), so a file shorter than
    expected reads short instead of failing to map. The file object may be closed once this is built; the
    mapping lives as long as this object or any view it handed out.
    """

    def __init__(self, fileobj: BinaryIO, size: int | None = None) -> None:
        length = os.fstat(fileobj.fileno()).st_size
        self.size = length if size is None else min(size, length)
        self._mapped = mmap.mmap(fileobj.fileno(), self.size, prot=mmap.PROT_READ) if self.size else None
        self._view = memoryview(self._mapped) if self._mapped is not None else memoryview(b"")
        self._advice: int | None = getattr(mmap, "MADV_DONTNEED", None)  # not on every platform
        self._released = 0  # pages below this were released already

    def __call__(self, start: int, end: int) -> memoryview:
        return self._view[start : min(end, self.size)] if end > start else self._view[0:0]

    def release_before(self, position: int) -> None:
        """Drop the pages wholly below ``position`` from the resident set (they stay readable)."""
        upto = min(position, self.size) // mmap.PAGESIZE * mmap.PAGESIZE
        if self._mapped is None or self._advice is None or upto - self._released < RELEASE_STEP:
            return
        self._mapped.madvise(self._advice, self._released, upto - self._released)
        self._released = upto
