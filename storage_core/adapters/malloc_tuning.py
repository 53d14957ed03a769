"""glibc's allocator told to keep the gateway's answer buffers instead of giving them back to the kernel.

A tier answer is one buffer of up to a partition's fetch limit (1 MiB by default) read from the tier,
written to the client and freed, once per fetch. glibc serves a buffer that large with a fresh ``mmap`` and
returns it with ``munmap`` on free (or trims the heap top it came from), so every answer paid for new
zeroed pages: page faults measured at a quarter of a file:// tier read's CPU (py-spy of the gateway under
ConsumerPerformance: ``bytearray(size)`` took 4.5x the ``preadv`` that fills it). Raising the mmap and trim
thresholds lets freed buffers be reused by the next answer. Memory a burst of consumers used stays with the
process up to ``TRIM_THRESHOLD`` beyond what is in use (the peak, which bounds RSS, is unchanged).

Only the allocator's choice of where memory comes from changes; what a buffer holds never does. A C
library without ``mallopt`` (musl) is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("tierkeeper.gateway")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter numbers (malloc.h)."""
MMAP_THRESHOLD = 16 << 20
"""Allocations below this come from the heap, where freed ones are reused (an answer per partition is at
most its fetch limit, 1 MiB unless the client raised it)."""
TRIM_THRESHOLD = 64 << 20
"""Free memory at the heap's top kept for reuse before it is given back to the kernel."""


def keep_freed_buffers() -> bool:
    """Set the thresholds (once, at start, before the buffers are allocated); False where the C library
    has no ``mallopt`` or refuses them."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not done:
        log.info("the C library did not take the malloc thresholds; answer buffers come from fresh pages")
    return done
