"""One connection to one broker, owned by one client connection.

The gateway numbers the requests it sends itself, so its own requests (ListOffsets for a partition's high
watermark, Metadata for a topic id) travel on the client's authenticated connection beside the client's,
and each response finds its waiter by correlation id. A broker answers a connection's requests in order,
and a Produce with acks=0 gets no answer at all (nothing waits for one).

A request sent with a *streamer* may have its response handed over before it has arrived: the streamer is
given the reader at the start of the response (after its correlation id) and either takes the whole
response (writing it on to the client as it arrives; its future then completes with :data:`STREAMED`) or
hands back the bytes it read, and the response is read whole as any other.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Sequence

from storage_core.gateway.addresses import Address
from storage_core.gateway.protocol import SIZE, ProtocolError, framed_with_correlation_id
from storage_core.gateway_server.frames import write_chunks

STREAMED = b""
"""A response the streamer took and passed on whole: nothing is left to answer."""

Streamer = Callable[[int, asyncio.StreamReader], Awaitable[bytes | None]]
"""Called with the response's size (after the correlation id) and the reader positioned there: returns None
when it took the whole response, else the bytes it read (the response is then read whole)."""


class UpstreamError(ConnectionError):
    """The broker connection failed or closed: every request waiting on it fails with this."""


class Upstream:
    def __init__(
        self,
        address: Address,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        max_frame_bytes: int,
    ) -> None:
        self.address = address
        self._reader = reader
        self._writer = writer
        self._max = max_frame_bytes
        self._next_id = 1
        self._waiting: dict[int, tuple[asyncio.Future[bytes], Streamer | None]] = {}
        self._closed: BaseException | None = None
        self.gone = asyncio.Event()
        """Set when the connection is over, whoever ended it."""
        self._pump = asyncio.get_running_loop().create_task(self._read_responses())
        self.broker_versions: dict[int, tuple[int, int]] = {}
        """The broker's ApiVersions, once the client asked (the gateway's own requests use them)."""

    @classmethod
    async def connect(
        cls, address: Address, tls: ssl.SSLContext | None, *, timeout_s: float, max_frame_bytes: int
    ) -> Upstream:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(address.host, address.port, ssl=tls, limit=1 << 20), timeout_s
            )
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            raise UpstreamError(
                f"broker {address}: {exc or 'no answer within ' + str(timeout_s) + ' s'}"
            ) from exc
        return cls(address, reader, writer, max_frame_bytes)

    def send(
        self, payload: bytes, *, expect_response: bool = True, streamer: Streamer | None = None
    ) -> asyncio.Future[bytes] | None:
        """Send a request payload (its correlation id is replaced by the gateway's own); the future
        completes with the response payload (correlation id replaced back by the caller's choice), or with
        :data:`STREAMED` when ``streamer`` took it."""
        if self._closed is not None:
            raise UpstreamError(f"broker {self.address}: connection closed ({self._closed})")
        correlation_id = self._next_id
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF or 1
        future: asyncio.Future[bytes] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._waiting[correlation_id] = (future, streamer)
        write_chunks(self._writer, framed_with_correlation_id(payload, correlation_id))
        return future

    def send_chunks(self, chunks: Sequence[bytes | memoryview]) -> asyncio.Future[bytes]:
        """Send an encoded frame (size prefix first) of the gateway's own; its correlation id is replaced."""
        payload = b"".join(chunks[1:])
        future = self.send(payload)
        assert future is not None
        return future

    async def drain(self) -> None:
        await self._writer.drain()

    async def _read_responses(self) -> None:
        error: BaseException
        current: asyncio.Future[bytes] | None = None
        try:
            while True:
                current = None
                try:
                    head = await self._reader.readexactly(8)
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        raise ProtocolError("connection closed inside a response's first 8 bytes") from None
                    error = UpstreamError(f"broker {self.address} closed the connection")
                    break
                (size,) = SIZE.unpack_from(head)
                if size < 4 or size > self._max:
                    raise ProtocolError(f"response of {size} bytes is outside 4..{self._max}")
                (correlation_id,) = SIZE.unpack_from(head, 4)
                waiter = self._waiting.pop(correlation_id, None)
                if waiter is None:
                    error = UpstreamError(f"broker {self.address} answered a request nobody sent")
                    break
                future, streamer = waiter
                current = future
                read = b""
                if streamer is not None and not future.done():
                    taken = await streamer(size - 4, self._reader)
                    if taken is None:
                        future.set_result(STREAMED)
                        continue
                    read = taken
                rest = await self._reader.readexactly(size - 4 - len(read))
                payload = head[4:] + read + rest
                if not future.done():
                    future.set_result(payload)
        except asyncio.IncompleteReadError as exc:
            error = UpstreamError(
                f"broker {self.address} closed the connection inside a response ({len(exc.partial)} bytes)"
            )
        except (OSError, ProtocolError, ssl.SSLError) as exc:
            error = UpstreamError(f"broker {self.address}: {exc}")
        except asyncio.CancelledError:
            error = UpstreamError(f"broker {self.address}: connection closed by the gateway")
        if current is not None and not current.done():  # the response being read (or streamed) when it failed
            current.set_exception(error)
            current.exception()
        self._fail(error)

    def _fail(self, error: BaseException) -> None:
        self._closed = error
        self.gone.set()
        for future, _ in self._waiting.values():
            if not future.done():
                future.set_exception(error)
                future.exception()  # its waiter may be gone with its client: not "never retrieved"
        self._waiting.clear()
        self._writer.close()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def close(self) -> None:
        self._pump.cancel()
        try:
            await self._pump
        except asyncio.CancelledError:
            pass
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass
