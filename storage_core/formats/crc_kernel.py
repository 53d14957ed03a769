"""CRC-32C inside numba-compiled loops, so the Arrow decoder checks a batch while its bytes are in cache.

The ``crc32c`` package is as fast on data already in cache, but it is a Python call: the decoder's only
way to use it is a separate pass over every batch before the record walk, and on a mapped object that
pass reads the bytes from memory a second time (docs/benchmarks.md, "Spark data pipeline"). Here the CRC
runs in the same compiled loop that then walks the batch's records.

x86-64 has a CRC-32C instruction (SSE 4.2) but it depends on its previous result, so one chain moves
8 bytes per ~3 cycles. The loop below keeps three independent chains over three adjacent blocks and
joins them: appending a block of L bytes to a CRC register is a linear map of the register (feeding L
zero bytes) XOR the CRC of the block alone, and that map, for the two fixed block sizes used, is four
256-entry tables computed once from the polynomial here (GF(2) matrix powers).

The instruction exists only where LLVM targets SSE 4.2; :data:`HARDWARE` says whether the compiled loops
have it. Where not (another architecture, or numba told to compile for a generic CPU) the same loops
compile with a table-driven step in its place, correct but several times slower than the ``crc32c``
package, so callers check CRCs with :func:`storage_core.formats.crc.crc32c` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

POLYNOMIAL = 0x82F63B78
"""CRC-32C (Castagnoli), bit-reflected."""

LONG = 8192
SHORT = 256
"""Block sizes of the three-chain loop: long blocks for large batches, short ones for the rest."""


def _target_has_sse42() -> bool:
    # What numba compiles for: its configured CPU and features when set, else the host's.
    import llvmlite.binding as llvm
    from numba.core import config

    if not llvm.get_process_triple().startswith("x86_64"):
        return False
    cpu_name = getattr(config, "CPU_NAME", None)
    configured = getattr(config, "CPU_FEATURES", None)
    if cpu_name and cpu_name != "host":
        features = configured or ""
    else:
        try:
            features = configured or llvm.get_host_cpu_features().flatten()
        except RuntimeError:  # LLVM cannot tell on this host: assume the instruction is missing
            return False
    return "+sse4.2" in features.split(",")


HARDWARE = _target_has_sse42()
"""Whether the compiled loops have the CRC instruction (see the module's text)."""


def _byte_table() -> np.ndarray:
    """The classic 256-entry table: the register after feeding one byte ``b`` into register ``b``."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(POLYNOMIAL), table >> 1).astype(np.uint32)
    return table


def _apply(columns: list[int], register: int) -> int:
    """A 32x32 GF(2) matrix, given as its columns (column j = image of bit j), applied to ``register``."""
    out = 0
    for j in range(32):
        if register >> j & 1:
            out ^= columns[j]
    return out


def _zeros_operator(nbytes: int) -> list[int]:
    """The columns of the matrix that feeds ``nbytes`` zero bytes into a register (square and multiply:
    plain integers, so no BLAS threads are started at import)."""
    power = [POLYNOMIAL if j == 0 else 1 << (j - 1) for j in range(32)]  # one zero bit
    result = [1 << j for j in range(32)]
    bits = 8 * nbytes
    while bits:
        if bits & 1:
            result = [_apply(power, column) for column in result]
        power = [_apply(power, column) for column in power]
        bits >>= 1
    return result


def _shift_tables(nbytes: int) -> np.ndarray:
    """``t[k][b]``: the register after ``nbytes`` zero bytes fed into register ``b << 8k``; XOR the four
    lookups of a register's bytes to shift the whole register."""
    columns = _zeros_operator(nbytes)
    return np.array([[_apply(columns, b << (8 * k)) for b in range(256)] for k in range(4)], dtype=np.uint32)


BYTE_TABLE = _byte_table()
LONG_SHIFT = _shift_tables(LONG)
SHORT_SHIFT = _shift_tables(SHORT)


def _jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    # numba is untyped; the cast keeps mypy --strict from treating the kernels as untyped.
    return cast(Callable[..., Any], numba.njit(cache=True, nogil=True)(fn))


def _crc32_u64_intrinsic(typingctx: Any, crc: Any, word: Any) -> Any:
    """The SSE 4.2 ``crc32`` instruction on 8 bytes: ``(register, word) -> register``."""
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module, ir.FunctionType(i64, [i64, i64]), "llvm.x86.sse42.crc32.64.64"
        )
        return builder.call(fn, args)

    return sig, codegen


def _load_u64_intrinsic(typingctx: Any, buf: Any, pos: Any) -> Any:
    """8 bytes of a uint8 array from ``pos`` as one little-endian word (unaligned; bounds are the
    caller's)."""
    sig = types.uint64(buf, pos)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data, at = args
        array = context.make_array(signature.args[0])(context, builder, data)
        address = builder.gep(array.data, [at])
        return builder.load(builder.bitcast(address, ir.IntType(64).as_pointer()), align=1)

    return sig, codegen


def _table_crc_word(crc: Any, word: Any) -> Any:
    """What the instruction computes, a byte at a time (targets without it)."""
    for _ in range(8):
        crc = np.uint64(BYTE_TABLE[(crc ^ word) & np.uint64(0xFF)]) ^ (crc >> np.uint64(8))
        word = word >> np.uint64(8)
    return crc


_crc_word = cast(
    Callable[[Any, Any], Any], intrinsic(_crc32_u64_intrinsic) if HARDWARE else _jit(_table_crc_word)
)
_load_word = cast(Callable[[Any, Any], Any], intrinsic(_load_u64_intrinsic))


def _shift(tables: Any, crc: Any) -> Any:
    return (
        np.uint64(tables[0, crc & 0xFF])
        ^ np.uint64(tables[1, (crc >> 8) & 0xFF])
        ^ np.uint64(tables[2, (crc >> 16) & 0xFF])
        ^ np.uint64(tables[3, crc >> 24])
    )


_shift_by = _jit(_shift)


def _three_chains(buf: Any, pos: int, crc: Any, block: int, tables: Any) -> Any:
    """The register after ``buf[pos:pos + 3 * block]``, fed as three chains joined by ``tables``."""
    c1 = np.uint64(0)
    c2 = np.uint64(0)
    stop = pos + block
    while pos < stop:
        crc = _crc_word(crc, _load_word(buf, pos))
        c1 = _crc_word(c1, _load_word(buf, pos + block))
        c2 = _crc_word(c2, _load_word(buf, pos + 2 * block))
        pos += 8
    crc = _shift_by(tables, crc) ^ c1
    return _shift_by(tables, crc) ^ c2


_chains = _jit(_three_chains)


def _crc32c(buf: Any, start: int, end: int) -> Any:
    """CRC-32C of ``buf[start:end]`` (a uint8 array; the range must lie inside it)."""
    crc = np.uint64(0xFFFFFFFF)
    pos = start
    while end - pos >= 3 * LONG:
        crc = _chains(buf, pos, crc, LONG, LONG_SHIFT)
        pos += 3 * LONG
    while end - pos >= 3 * SHORT:
        crc = _chains(buf, pos, crc, SHORT, SHORT_SHIFT)
        pos += 3 * SHORT
    while end - pos >= 8:
        crc = _crc_word(crc, _load_word(buf, pos))
        pos += 8
    while pos < end:
        crc = np.uint64(BYTE_TABLE[(crc ^ np.uint64(buf[pos])) & 0xFF]) ^ (crc >> np.uint64(8))
        pos += 1
    return crc ^ np.uint64(0xFFFFFFFF)


crc32c_range = _jit(_crc32c)
"""``crc32c_range(buf, start, end)``, for other compiled loops (the tables are compiled in as constants)."""


def crc32c(data: np.ndarray, start: int = 0, end: int | None = None) -> int:
    """CRC-32C of ``data[start:end]`` (uint8 array) through the compiled loop (tests and benchmarks)."""
    stop = len(data) if end is None else end
    if not 0 <= start <= stop <= len(data):
        raise ValueError(f"range {start}..{stop} outside the {len(data)} bytes given")
    return int(crc32c_range(data, start, stop))
