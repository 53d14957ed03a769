"""A gateway in the test's own event loop in front of a scripted broker (a script on a socket): nothing of
such a test depends on timing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from storage_core.adapters.store import RemoteStore
from storage_core.gateway.addresses import Address, PortRule
from storage_core.gateway.block_cache import BlockCache
from storage_core.gateway.history import TierHistory
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
