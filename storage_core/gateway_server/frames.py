"""Reading whole Kafka frames from a stream, with a size limit; writing them without copying record sets."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from storage_core.gateway.protocol import SIZE, ProtocolError

LARGE_CHUNK = 64 << 10


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> bytes | None:
    """The next frame's payload, or None at a clean end of stream (no partial frame)."""
    try:
        head = await reader.readexactly(SIZE.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolError(
                f"connection closed inside a frame's size ({len(exc.partial)} of 4 bytes)"
            ) from None
        return None
    (size,) = SIZE.unpack(head)
    if size < 0 or size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes is outside 0..{max_bytes} (socket.request.max.bytes)")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(
            f"connection closed inside a frame ({len(exc.partial)} of {size} bytes)"
        ) from None


def write_chunks(writer: asyncio.StreamWriter, chunks: Sequence[bytes | memoryview]) -> None:
    """Write a frame's pieces in order: small ones joined into one write, large ones (record sets) handed
    to the transport as they are. ``writelines`` would join every piece into one new buffer first (Python
    3.11's transports do), a copy of each megabyte served; the transport sends a large piece straight from
    the caller's buffer and copies only what the socket did not take at once."""
    small: list[bytes | memoryview] = []
    for chunk in chunks:
        if len(chunk) < LARGE_CHUNK:
            small.append(chunk)
            continue
        if small:
            writer.write(b"".join(small))
            small = []
        writer.write(chunk)
    if small:
        writer.write(b"".join(small))
