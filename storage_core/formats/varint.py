"""Zigzag variable-length integers, as used inside Kafka records (protobuf's ``sint32``/``sint64``).

A varint holds a 32-bit value in at most 5 bytes, a varlong a 64-bit value in at most 10. Decoding works
on any indexable buffer and returns the position after the value, so the record decoder can walk a
``memoryview`` without copying.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

Readable = bytes | bytearray | memoryview

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class VarintError(ValueError):
    """A varint that runs past its buffer or past its maximum length."""


def _decode_long(buf: Readable, pos: int, max_shift: int) -> tuple[int, int]:
    """The multi-byte case; callers handle single-byte values inline because those dominate."""
    try:
        raw = buf[pos] & 0x7F
        shift = 7
        pos += 1
        while True:
            byte = buf[pos]
            pos += 1
            raw |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (raw >> 1) ^ -(raw & 1), pos
            shift += 7
            if shift > max_shift:
                raise VarintError(f"varint longer than {max_shift // 7 + 1} bytes ending at position {pos}")
    except IndexError:
        raise VarintError(f"varint truncated at position {pos}") from None


class _Decoder(Protocol):
    def __call__(self, buf: Readable, pos: int = 0) -> tuple[int, int]: ...


def _decoder(max_shift: int) -> _Decoder:
    """The decoder of zigzag values of at most ``max_shift // 7 + 1`` bytes. The width is bound here, not
    passed per call: the record decoder calls these for every field of every record."""

    def decode(buf: Readable, pos: int = 0) -> tuple[int, int]:
        if pos < len(buf):
            byte = buf[pos]
            if byte < 0x80:
                return (byte >> 1) ^ -(byte & 1), pos + 1
        return _decode_long(buf, pos, max_shift)

    return decode


decode_varint = _decoder(28)
"""Decode a zigzag varint (at most 5 bytes) at ``pos``; return ``(value, next_position)``."""
decode_varlong = _decoder(63)
"""Decode a zigzag varlong (at most 10 bytes) at ``pos``; return ``(value, next_position)``."""


def _encode(value: int, out: Callable[[int], None]) -> None:
    raw = value * 2 if value >= 0 else -value * 2 - 1
    while raw >= 0x80:
        out((raw & 0x7F) | 0x80)
        raw >>= 7
    out(raw)


def encode_varint(value: int) -> bytes:
    """Zigzag-encode a signed 32-bit value."""
    return _encode_checked(value, _INT32_MIN, _INT32_MAX, "a varint (signed 32-bit)")


def encode_varlong(value: int) -> bytes:
    """Zigzag-encode a signed 64-bit value."""
    return _encode_checked(value, _INT64_MIN, _INT64_MAX, "a varlong (signed 64-bit)")


def _encode_checked(value: int, low: int, high: int, kind: str) -> bytes:
    if not low <= value <= high:
        raise ValueError(f"{value} does not fit {kind}")
    out = bytearray()
    _encode(value, out.append)
    return bytes(out)


def size_of_varint(value: int) -> int:
    """Number of bytes :func:`encode_varint`/:func:`encode_varlong` would produce for ``value``."""
    raw = value * 2 if value >= 0 else -value * 2 - 1
    size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size
