"""Byte ranges of a tier on this machine's filesystem (file://), read straight from its files.

The gateway's answers from a local tier need no cache of their own: the kernel's page cache is one. A
range is one ``preadv`` into a fresh buffer (one copy, where a read through fsspec and the block cache made
three), and ``nowait`` reads with ``RWF_NOWAIT``, which fails at once instead of waiting for the disk when a
page is not resident: the event loop serves what memory holds, and a thread reads the rest. The kernel
is asked to read the bytes after a read ahead (``POSIX_FADV_WILLNEED``), so a consumer reading history
sequentially finds its next range resident without a thread of ours reading ahead. The advice is given
again only once reads have used half of it: each call walks the page cache over its whole range, resident
or not, and cost as much as a fetch's read when given on every read.

Each read opens and closes its file (a few microseconds): segment objects are immutable and never reused,
and a file removed by remote retention between two reads is then reported as missing, as the store would.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from storage_core.errors import RemoteObjectNotFound, RemoteStoreError
from storage_core.gateway.ranges import Buffer, NotReady

READ_AHEAD_BYTES = 4 << 20
"""What the kernel is asked to read ahead of a range (a few fetches' worth of one partition)."""
ADVISED_OBJECTS = 1024
"""Objects whose read-ahead this source remembers (about one per partition being read)."""

_NOWAIT = getattr(os, "RWF_NOWAIT", None)
"""Linux >= 4.14 with Python >= 3.7; where missing, ``nowait`` reads say NotReady and threads read."""


class LocalRanges:
    def __init__(self, *, read_ahead_bytes: int = READ_AHEAD_BYTES) -> None:
        self.read_ahead_bytes = read_ahead_bytes
        self._on_hit: Callable[[bool], None] | None = None
        self._advised: OrderedDict[str, tuple[int, int]] = OrderedDict()
        """Object key -> the range last advised."""
        self._advised_lock = threading.Lock()  # the event loop and the gateway's tier threads read at once

    def observe(self, on_hit: Callable[[bool], None]) -> None:
        """Call ``on_hit(True|False)`` for each read asked not to wait: resident in memory or not."""
        self._on_hit = on_hit

    def read(self, key: str, start: int, end: int, size: int, *, nowait: bool = False) -> Buffer:
        end = min(end, size)
        if end <= start:
            return b""
        if nowait and _NOWAIT is None:
            raise NotReady(key)
        try:
            fd = os.open(key, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise RemoteObjectNotFound(f"{key}: not found (deleted by remote retention?)") from None
        except OSError as exc:
            raise RemoteStoreError(f"reading {key}: {exc.strerror or exc}") from exc
        try:
            data = self._read(fd, key, start, end, nowait)
            if self.read_ahead_bytes and end < size and self._should_advise(key, start, end):
                with contextlib.suppress(OSError):  # advice only: a filesystem may not take it
                    os.posix_fadvise(fd, end, min(self.read_ahead_bytes, size - end), os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)
        return data

    def _should_advise(self, key: str, start: int, end: int) -> bool:
        """Whether to advise reading ahead from ``end``: not while the last advice for ``key`` covers this
        read and more than half of it is still ahead (a read elsewhere in the object advises anew)."""
        with self._advised_lock:
            last = self._advised.get(key)
            if last is not None and last[0] <= start and end <= last[1] - self.read_ahead_bytes // 2:
                return False
            self._advised[key] = (start, end + self.read_ahead_bytes)
            self._advised.move_to_end(key)
            while len(self._advised) > ADVISED_OBJECTS:
                self._advised.popitem(last=False)
            return True

    @property
    def resident_bytes(self) -> int:
        """None held by the gateway: the page cache holds a local tier's bytes (the kernel's to bound)."""
        return 0

    def _read(self, fd: int, key: str, start: int, end: int, nowait: bool) -> Buffer:
        buffer = bytearray(end - start)
        view = memoryview(buffer)
        done = 0
        while done < len(buffer):
            try:
                if nowait:
                    n = os.preadv(fd, [view[done:]], start + done, _NOWAIT)  # type: ignore[arg-type]
                else:
                    n = os.preadv(fd, [view[done:]], start + done)
            except BlockingIOError:
                self._observe(nowait, False)
                raise NotReady(key) from None
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise RemoteStoreError(f"reading {key}: {exc.strerror or exc}") from exc
            if n == 0:  # the file ends early: the caller finds the batch cut and says so
                self._observe(nowait, True)
                return view[:done]
            done += n
        self._observe(nowait, True)
        return buffer

    def _observe(self, nowait: bool, resident: bool) -> None:
        if nowait and self._on_hit is not None:
            self._on_hit(resident)
