"""Reading whole Kafka frames from a stream, with a size limit; writing them without copying record sets."""

from __future__ import annotations

import asyncio
import os
from asyncio import selector_events
from collections.abc import Sequence

from storage_core.gateway.protocol import SIZE, ProtocolError

LARGE_CHUNK = 64 << 10
_IOV_MAX = 1024
"""Linux's limit on one ``writev``'s pieces (a frame with more goes through the transport)."""
_PLAIN_TRANSPORT = selector_events._SelectorSocketTransport  # type: ignore[attr-defined]  # asyncio's plain TCP one


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
    """Write a frame's pieces in order: small ones joined, large ones (record sets) as they are, all in one
    ``writev`` when the connection is a plain socket with nothing queued, so the frame leaves in one system
    call and its reader is woken once rather than once per piece (a size and header, the records, the
    trailing fields). What the socket does not take at once, and every piece on a TLS connection, goes to
    the transport, which copies only that. ``writelines`` would join every piece into one new buffer first
    (Python 3.11's transports do): a copy of each megabyte served."""
    pieces = _joined_small(chunks)
    fd = _plain_socket_fd(writer.transport)
    if fd is not None and len(pieces) <= _IOV_MAX:
        try:
            sent = os.writev(fd, pieces)
        except OSError:  # would block, or a broken connection: the transport meets it and says so
            sent = 0
        pieces = _after(pieces, sent)
    for piece in pieces:
        writer.write(piece)


def _joined_small(chunks: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    out: list[bytes | memoryview] = []
    small: list[bytes | memoryview] = []
    for chunk in chunks:
        if len(chunk) < LARGE_CHUNK:
            small.append(chunk)
            continue
        if small:
            out.append(b"".join(small))
            small = []
        out.append(chunk)
    if small:
        out.append(b"".join(small))
    return out


def _plain_socket_fd(transport: asyncio.BaseTransport) -> int | None:
    """The socket of a plain TCP transport with nothing queued (writing to it directly keeps the order);
    None for anything else: above all a TLS transport, whose socket carries encrypted bytes only."""
    if type(transport) is not _PLAIN_TRANSPORT or transport.is_closing():
        return None
    assert isinstance(transport, asyncio.WriteTransport)
    if transport.get_write_buffer_size():
        return None
    sock = transport.get_extra_info("socket")
    return None if sock is None else int(sock.fileno())


def _after(pieces: list[bytes | memoryview], sent: int) -> list[bytes | memoryview]:
    """What is left of ``pieces`` once their first ``sent`` bytes are written (views, never copies)."""
    for i, piece in enumerate(pieces):
        if sent < len(piece):
            return [memoryview(piece)[sent:] if sent else piece, *pieces[i + 1 :]]
        sent -= len(piece)
    return []
