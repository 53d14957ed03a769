"""One connection to one broker, owned by one client connection.

The gateway numbers the requests it sends itself, so its own requests (ListOffsets for a partition's high
watermark, Metadata for a topic id) travel on the client's authenticated connection beside the client's,
and each response finds its waiter by correlation id. A broker answers a connection's requests in order,
and a Produce with acks=0 gets no answer at all (nothing waits for one).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence

from storage_core.gateway.addresses import Address
from storage_core.gateway.protocol import ProtocolError, framed_with_correlation_id, response_correlation_id
from storage_core.gateway_server.frames import read_frame, write_chunks


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
        self._waiting: dict[int, asyncio.Future[bytes]] = {}
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

    def send(self, payload: bytes, *, expect_response: bool = True) -> asyncio.Future[bytes] | None:
        """Send a request payload (its correlation id is replaced by the gateway's own); the future
        completes with the response payload (correlation id replaced back by the caller's choice)."""
        if self._closed is not None:
            raise UpstreamError(f"broker {self.address}: connection closed ({self._closed})")
        correlation_id = self._next_id
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF or 1
        future: asyncio.Future[bytes] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._waiting[correlation_id] = future
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
        try:
            while True:
                payload = await read_frame(self._reader, self._max)
                if payload is None:
                    error = UpstreamError(f"broker {self.address} closed the connection")
                    break
                future = self._waiting.pop(response_correlation_id(payload), None)
                if future is None:
                    error = UpstreamError(f"broker {self.address} answered a request nobody sent")
                    break
                if not future.done():
                    future.set_result(payload)
        except (OSError, ProtocolError, ssl.SSLError) as exc:
            error = UpstreamError(f"broker {self.address}: {exc}")
        except asyncio.CancelledError:
            error = UpstreamError(f"broker {self.address}: connection closed by the gateway")
        self._fail(error)

    def _fail(self, error: BaseException) -> None:
        self._closed = error
        self.gone.set()
        for future in self._waiting.values():
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
