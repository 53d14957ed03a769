"""Copy a local file into a local object in the kernel, inspecting the stored bytes as they land.

A plain streaming copy brings every byte into Python twice (read, then write) on one thread, while
``fsspec``'s ``put_file`` is a single in-kernel copy. Here a helper thread copies the file range by range
with ``copy_file_range`` (page cache to page cache, the GIL released), and the calling thread maps each
copied range of the *written object* and hands it to ``inspect`` (the copy path's CRC validation) in
small slices. So the bytes checked are the bytes stored, they are never copied into Python, and the check
of one range overlaps the copy of the next.

If ``inspect`` raises, the copy stops and the error propagates; the partial object is left for the
caller to discard (it is not COPY_FINISHED, so no reader trusts it).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import queue
import threading
from collections.abc import Callable
from typing import BinaryIO

from storage_core.errors import CorruptDataError

# Copy ranges large enough that the hand-off between the threads costs nothing (1 MiB ranges throughout
# measured ~20% slower), except at both ends of a file, where they ramp from FIRST_RANGE (plan_ranges);
# inspected in slices small enough for the CRC pass over each to run in the CPU cache.
RANGE = 32 << 20
FIRST_RANGE = 1 << 20
SLICE = 1 << 20
_AHEAD = 2  # ranges copied but not yet inspected: bounds how far a failed check lets the copy run on
_UNSUPPORTED = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP}

Inspect = Callable[[memoryview], None]


def copy_inspected(src: BinaryIO, size: int, dest: str, inspect: Inspect, *, fsync: bool) -> int:
    """Copy ``size`` bytes of ``src`` (from byte 0) to the file ``dest``; return the bytes copied.

    ``inspect`` sees the copied bytes in order, mapped from ``dest``, in slices of up to ``SLICE`` bytes;
    a view is valid only during the call. ``fsync`` flushes ``dest`` to disk before returning; the disk
    writes then start range by range during the copy instead of all at the end. Raises
    ``CorruptDataError`` when ``src`` holds fewer than ``size`` bytes.
    """
    with open(dest, "wb") as out, open(dest, "rb", buffering=0) as back:
        copier = _RangeCopier(src.fileno(), out.fileno(), size, write_behind=fsync)
        copier.start()
        try:
            while True:
                done = copier.next_range()
                if done is None:
                    break
                _inspect_range(back.fileno(), *done, inspect)
        finally:
            copier.stop()
        if fsync:
            out.flush()
            os.fsync(out.fileno())
    return size


def plan_ranges(size: int, largest: int, first: int) -> list[tuple[int, int]]:
    """``(start, length)`` ranges covering ``[0, size)``: doubling from ``first`` up to ``largest``, then
    halving again towards the end.

    The copy and the check form a two-stage pipeline, so each file costs one range of copying before
    the check can start and one range of checking after the copy ends. With equal ranges that is a whole
    range per stage (a quarter of a 128 MiB segment in 32 MiB ranges); small ranges at both ends shrink
    it to ``first`` while the middle keeps the large ranges whose hand-off costs nothing.
    """
    lengths: list[int] = []
    tail: list[int] = []
    # Ranges in whole multiples of ``first`` start on page boundaries (the check maps each one); the odd
    # bytes past the last multiple join the final range.
    odd = size % first
    left, length = size - odd, first
    while length < largest and left >= 2 * length:
        lengths.append(length)
        tail.append(length)
        left -= 2 * length
        length *= 2
    while left > 0:
        lengths.append(min(largest, left))
        left -= lengths[-1]
    lengths.extend(reversed(tail))
    if odd:
        if lengths:
            lengths[-1] += odd
        else:
            lengths.append(odd)
    ranges, start = [], 0
    for length in lengths:
        ranges.append((start, length))
        start += length
    return ranges


def _inspect_range(fd: int, start: int, length: int, inspect: Inspect) -> None:
    mapped = mmap.mmap(fd, length, prot=mmap.PROT_READ, offset=start)
    view = memoryview(mapped)
    for offset in range(0, length, SLICE):
        inspect(view[offset : offset + SLICE])
    # Not in a finally: after a failed check the traceback still holds slices of the mapping, and closing
    # it would raise over the real error; the mapping is then unmapped when the last slice is gone.
    view.release()
    mapped.close()


class _RangeCopier(threading.Thread):
    """Copies ``[0, size)`` range by range and announces each finished range on a bounded queue."""

    def __init__(self, src_fd: int, dst_fd: int, size: int, *, write_behind: bool) -> None:
        super().__init__(name="tierkeeper-local-copy", daemon=True)
        self._src, self._dst, self._size = src_fd, dst_fd, size
        self._write_behind = _writeback_starter() if write_behind else None
        self._done: queue.Queue[tuple[int, int] | BaseException | None] = queue.Queue(maxsize=_AHEAD)
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            copy = _kernel_copy
            for position, length in plan_ranges(self._size, RANGE, FIRST_RANGE):
                if self._stopping.is_set():
                    break
                copied = 0
                while copied < length:
                    try:
                        n = copy(self._src, self._dst, position + copied, length - copied)
                    except OSError as exc:
                        if copy is not _kernel_copy or exc.errno not in _UNSUPPORTED:
                            raise
                        copy = _user_copy  # e.g. across filesystems on older kernels
                        continue
                    if n == 0:
                        raise CorruptDataError(
                            f"segment ended {self._size - position - copied} bytes early while copying"
                        )
                    copied += n
                if self._write_behind is not None:
                    self._write_behind(self._dst, position, length)
                self._put((position, length))
            self._put(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the inspecting thread, which raises it
            self._put(exc)

    def _put(self, item: tuple[int, int] | BaseException | None) -> None:
        while not self._stopping.is_set():
            try:
                self._done.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def next_range(self) -> tuple[int, int] | None:
        item = self._done.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def stop(self) -> None:
        """Stop copying (after an error, or at the end) and wait for the thread."""
        self._stopping.set()
        self.join()


@functools.cache
def _writeback_starter() -> Callable[[int, int, int], None] | None:
    """``sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE)`` from the C library, if it has one.

    Starting each range's disk write as soon as it is copied lets the final fsync wait only for the last
    range, so a durable copy runs at about the disk's speed instead of copy time plus flush time. Python's
    os module does not offer the call; where the C library lacks it, the fsync alone still makes the copy
    durable.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    write = 2  # SYNC_FILE_RANGE_WRITE: start writing the dirty pages back, do not wait

    def start(fd: int, offset: int, length: int) -> None:
        call(fd, offset, length, write)  # a hint only: a failure leaves the work to the fsync

    return start


def _kernel_copy(src: int, dst: int, position: int, length: int) -> int:
    return os.copy_file_range(src, dst, length, position, position)


def _user_copy(src: int, dst: int, position: int, length: int) -> int:
    data = os.pread(src, length, position)
    return os.pwrite(dst, data, position) if data else 0
