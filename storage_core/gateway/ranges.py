"""Where the gateway's tier answers get their bytes: byte ranges of remote segment objects.

Two sources stand behind one shape: the block cache (any store: blocks fetched on threads and read ahead)
and, for a tier on this machine's filesystem, ranges read straight from the files
(storage_core/adapters/local_ranges.py). Either may be asked not to wait (``nowait``): a caller on the
event loop then gets the bytes only when they are already in memory (the cache's blocks, or the kernel's
page cache) and :class:`NotReady` otherwise, and goes to a thread instead. Serving a fetch on the event
loop itself saves the two thread hand-offs per fetch that otherwise bound a consumer reading history
(each waits for the GIL, up to the interpreter's 5 ms switch interval, while another thread computes).
"""

from __future__ import annotations

from typing import Protocol

Buffer = bytes | bytearray | memoryview


class NotReady(Exception):
    """The bytes asked for without waiting are not in memory yet (their read has been started)."""


class RangeSource(Protocol):
    @property
    def resident_bytes(self) -> int:
        """Bytes this source holds in memory (the gateway's cache metric)."""
        ...

    def read(self, key: str, start: int, end: int, size: int, *, nowait: bool = False) -> Buffer:
        """Bytes ``[start, end)`` of the object ``key`` of ``size`` bytes (``end`` cut to ``size``);
        shorter only when the object is. ``nowait``: raise :class:`NotReady` rather than wait for I/O."""
        ...
