"""What every client connection of one gateway shares: settings, the broker directory, the tier, metrics."""

from __future__ import annotations

import asyncio
import base64
import functools
import ssl
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from storage_core.gateway.addresses import Address, PortRule
from storage_core.gateway.group_members import GroupMembers
from storage_core.gateway.history import TierHistory
from storage_core.gateway_server.metrics import GatewayMetrics


@dataclass(frozen=True)
class Limits:
    max_frame_bytes: int = 100 << 20
    """Kafka's socket.request.max.bytes default: a larger frame closes the connection."""
    max_in_flight: int = 32
    """Requests of one client connection being handled at once; the next frame waits to be read."""
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    """A broker that does not answer one of the gateway's own requests (ListOffsets, Metadata) within
    this long fails the client's connection (never a hang)."""
    hwm_cache_s: float = 1.0
    """How long a partition's high watermark learned for a tier answer is reused on one connection."""
    grant_s: float = 1.0
    """How long the broker's OFFSET_OUT_OF_RANGE to a client's fetch lets that connection's later fetches of
    the partition below the broker's log start be answered from the tier without asking the broker
    (storage_core/gateway/grants.py); 0 asks on every fetch. The bound on a revoked READ."""


P = ParamSpec("P")
T = TypeVar("T")
Learn = Callable[[dict[int, Address], bool], Awaitable[None]]


@dataclass
class GatewayContext:
    rule: PortRule
    bootstrap: list[Address]
    history: TierHistory
    tier_pool: ThreadPoolExecutor
    metrics: GatewayMetrics
    limits: Limits = field(default_factory=Limits)
    upstream_tls: ssl.SSLContext | None = None
    brokers: dict[int, Address] = field(default_factory=dict)
    """Node id -> the broker's real address, from the latest response that named it."""
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    """Topic name -> id, from Metadata responses (Fetch before v13 and ListOffsets name topics only)."""
    learn: Learn | None = None
    groups: GroupMembers | None = None
    """The consumer-group members the connections carry (None: group tracking is off)."""

    async def learned(self, brokers: dict[int, Address], complete: bool) -> None:
        if self.learn is not None and brokers:
            await self.learn(brokers, complete)

    def run_tier(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
        """``fn`` on a tier thread: the one hand-off from the event loop for whatever blocks (tier reads and
        listings, discovery, reloads, probes). A future rather than a coroutine, so an answer read ahead can
        be started now and awaited later."""
        return asyncio.get_running_loop().run_in_executor(
            self.tier_pool, functools.partial(fn, *args, **kwargs)
        )


def kafka_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's 22-character url-safe base64 form of a topic id (the remote layout's)."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
