"""write_chunks (storage_core/gateway_server/frames.py): a frame's pieces leave in one ``writev`` on a plain
socket, and whatever the socket does not take at once follows through the transport, in order."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from storage_core.gateway_server import frames


async def _pair(rcvbuf: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, socket.socket]:
    """A connected (reader, writer) on a loopback socket and the raw peer socket with a small receive
    buffer, not read until the test says so."""
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
        asyncio.get_running_loop().create_future()
    )

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result((reader, writer))

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    peer = socket.socket()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    peer.setblocking(False)
    await asyncio.get_running_loop().sock_connect(peer, ("127.0.0.1", port))
    reader, writer = await accepted
    server.close()
    return reader, writer, peer


async def _read_all(peer: socket.socket, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        got += await asyncio.get_running_loop().sock_recv(peer, 1 << 20)
    return bytes(got)


@pytest.mark.asyncio
async def test_a_frame_larger_than_the_socket_takes_arrives_whole_and_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, writer, peer = await _pair(4096)
    # Small buffers at both ends, so the socket takes part of the frame whatever the machine's TCP limits.
    writer.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    calls: list[int] = []
    real_writev = os.writev

    def counting_writev(fd: int, buffers: list[bytes | memoryview]) -> int:
        sent = real_writev(fd, buffers)
        calls.append(sent)
        return sent

    monkeypatch.setattr(frames.os, "writev", counting_writev)
    big = os.urandom(8 << 20)  # far more than the socket's buffers: writev takes part of it
    pieces: list[bytes | memoryview] = [b"\x00\x00\x00\x10", b"head", memoryview(big)[: 4 << 20], b"mid"]
    pieces += [memoryview(big)[4 << 20 :], b"tail"]
    frames.write_chunks(writer, pieces)
    frames.write_chunks(writer, [b"second frame"])  # queued behind the rest: through the transport
    total = sum(len(p) for p in pieces) + len(b"second frame")
    assert len(calls) == 1 and 0 < calls[0] < total, "one writev, which the socket took only part of"
    assert writer.transport.get_write_buffer_size() > 0
    received, _ = await asyncio.gather(_read_all(peer, total), writer.drain())
    assert received == b"".join(bytes(p) for p in pieces) + b"second frame"
    writer.close()
    peer.close()


@pytest.mark.asyncio
async def test_a_frame_the_socket_takes_at_once_is_one_system_call(monkeypatch: pytest.MonkeyPatch) -> None:
    _, writer, peer = await _pair(1 << 20)
    calls: list[int] = []
    real_writev = os.writev

    def counting_writev(fd: int, buffers: list[bytes | memoryview]) -> int:
        calls.append(len(buffers))
        return real_writev(fd, buffers)

    monkeypatch.setattr(frames.os, "writev", counting_writev)
    sends: list[int] = []
    monkeypatch.setattr(writer.transport, "write", lambda data: sends.append(len(data)))
    body = os.urandom(200 << 10)
    frames.write_chunks(writer, [b"size", b"header", body, b"tags"])
    assert calls == [3], "small pieces joined around the record set, all in one writev"
    assert sends == [], "nothing left for the transport"
    assert await _read_all(peer, 4 + 6 + len(body) + 4) == b"sizeheader" + body + b"tags"
    writer.close()
    peer.close()
