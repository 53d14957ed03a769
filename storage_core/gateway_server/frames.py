"""Reading whole Kafka frames from a stream, with a size limit."""

from __future__ import annotations

import asyncio

from storage_core.gateway.protocol import SIZE, ProtocolError


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
