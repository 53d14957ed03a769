"""A gateway in the test's own event loop in front of a scripted broker (a script on a socket): nothing of
such a test depends on timing."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from storage_core.adapters.store import RemoteStore
from storage_core.gateway.addresses import Address, PortRule
from storage_core.gateway.block_cache import BlockCache
from storage_core.gateway.history import TierHistory
from storage_core.gateway.protocol import read_request_header
from storage_core.gateway_server.context import GatewayContext
from storage_core.gateway_server.metrics import GatewayMetrics
from storage_core.gateway_server.server import Gateway, Listen


@contextlib.asynccontextmanager
async def gateway_in_front(broker: Address, tmp_path: Path, rule: PortRule) -> AsyncIterator[Gateway]:
    """A started gateway whose bootstrap is ``broker``, over an empty file:// tier under ``tmp_path``."""
    pool = ThreadPoolExecutor(2)
    store = RemoteStore(f"file://{tmp_path / 'tier'}", {})
    ctx = GatewayContext(
        rule=rule,
        bootstrap=[broker],
        history=TierHistory(store, BlockCache(store.get_range, pool)),
        tier_pool=pool,
        metrics=GatewayMetrics(),
    )
    gateway = Gateway(ctx, Listen("127.0.0.1", 0))
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()
        pool.shutdown()


class AnsweringBroker:
    """Answers each request with ``answer(api_key, correlation_id, n)``, n counting the connection's
    requests; every answer of a connection waits until ``release`` is set (so several are in flight)."""

    def __init__(self, answer: Callable[[int, int, int], bytes]) -> None:
        self.answer = answer
        self.release = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> Address:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return Address("127.0.0.1", self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                header = read_request_header(await reader.readexactly(size))
                await self.release.wait()
                payload = self.answer(header.api_key, header.correlation_id, n)
                n += 1
                writer.write(struct.pack(">i", len(payload)) + payload)
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()
