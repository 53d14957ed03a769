"""CRC-32C (Castagnoli), the checksum of Kafka record batches and producer snapshots.

Backed by the ``crc32c`` package, which uses the SSE4.2/ARMv8 instruction when the CPU has it: the
copy path checksums every byte it ships, so a table-driven Python loop would be the bottleneck.
"""

from __future__ import annotations

from collections.abc import Callable

import crc32c as _crc32c

Buffer = bytes | bytearray | memoryview


def crc32c(data: Buffer, value: int = 0) -> int:
    """CRC-32C of ``data`` as an unsigned 32-bit int; pass a previous result as ``value`` to continue it.

    ``crc32c(b + c) == crc32c(c, crc32c(b))``, which is what lets a validator checksum a batch whose
    bytes arrive in several chunks.
    """
    return _crc32c.crc32c(data, value)


raw_crc32c: Callable[[Buffer, int], int] = _crc32c.crc32c
"""``crc32c`` without the wrapper's call, for loops that run once per record batch."""


def is_hardware_accelerated() -> bool:
    """True when the installed ``crc32c`` build uses a CPU instruction (benchmarks report this)."""
    return bool(_crc32c.hardware_based)
