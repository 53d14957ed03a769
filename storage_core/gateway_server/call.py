"""What a handler is given: one request being answered (:class:`Call`) and what its client connection's
handlers share (:class:`Connection`), and the two shapes of an entry in the handler table (:class:`Route`,
:func:`observing`). The table itself is gateway_server/handlers/__init__.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kio.static.protocol import Payload, RequestPayload, ResponsePayload

from storage_core.gateway import fetch as fetch_rules
from storage_core.gateway.addresses import PortRule, rewrite_addresses
from storage_core.gateway.fetch_stream import STREAM_MIN_BYTES
from storage_core.gateway.grants import Grants
from storage_core.gateway.messages import fetch_response
from storage_core.gateway.protocol import (
    CORRELATION_ID,
    SIZE,
    ApiKey,
    Chunks,
    ProtocolError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_response,
    framed_with_correlation_id,
    knows,
)
from storage_core.gateway_server.broker_queries import BrokerQueries
from storage_core.gateway_server.context import GatewayContext
from storage_core.gateway_server.frames import write_chunks
from storage_core.gateway_server.group_watch import GroupWatch
from storage_core.gateway_server.tier_answers import TierAnswers
from storage_core.gateway_server.upstream import STREAMED, Streamer, Upstream

log = logging.getLogger("tierkeeper.gateway")

Slot = asyncio.Future[Chunks | None]
"""Where a request's answer goes; the session writes answers in request order."""


@dataclass(slots=True)
class Writing:
    """Which answer the session's writer waits for, and whether the connection is closing: a cut-through
    response may be written straight to the client only while it is that answer. Shared by the session and
    its handlers as data (not a method of the session: a connection's handlers must not keep it alive in a
    reference cycle, with its prepared answers, after it closed)."""

    slot: Slot | None = None
    stopping: bool = False


@dataclass(frozen=True, slots=True)
class Connection:
    """What the handlers of one client connection share; it dies with the connection (grants, marks and
    prepared answers belong to one principal's connection)."""

    ctx: GatewayContext
    writer: asyncio.StreamWriter
    """The client's: only a cut-through response writes on it directly (:meth:`Call.its_turn`)."""
    writing: Writing
    tier: TierAnswers
    queries: BrokerQueries
    grants: Grants
    groups: GroupWatch | None
    """The consumer-group members this connection carries (None: the gateway does not track groups)."""


# Not frozen: one is made per request, and a frozen one costs several times as much to make.
@dataclass(slots=True)
class Call:
    """One client request being answered."""

    header: RequestHeader
    payload: bytes
    upstream: Upstream
    conn: Connection
    slot: Slot

    @property
    def ctx(self) -> GatewayContext:
        return self.conn.ctx

    def its_turn(self) -> bool:
        """Whether every earlier answer is written and the session waits for this one: only then may it
        go to the client as its bytes arrive."""
        writing = self.conn.writing
        return writing.slot is self.slot and not self.slot.done() and not writing.stopping

    async def roundtrip(self, payload: bytes | None = None, *, streamer: Streamer | None = None) -> bytes:
        """The broker's response payload to this request (or to ``payload`` in its place); with
        ``streamer``, possibly :data:`~storage_core.gateway_server.upstream.STREAMED`."""
        future = self.upstream.send(self.payload if payload is None else payload, streamer=streamer)
        assert future is not None
        await self.upstream.drain()
        return await future

    async def forward(self) -> Chunks:
        response = await self.roundtrip(streamer=self.whole())
        return [] if response is STREAMED else self.passed(response)

    def whole(self) -> Streamer:
        """:meth:`pass_whole` for a response the gateway forwards as it is (Produce, APIs nobody
        intercepts), when it is that response's turn."""

        async def take(size: int, reader: asyncio.StreamReader) -> bytes | None:
            if size >= STREAM_MIN_BYTES or not self.its_turn():
                return b""
            return await self.pass_whole(size, reader)

        return take

    async def pass_whole(self, size: int, reader: asyncio.StreamReader) -> bytes | None:
        """A small response whose turn it is (the writer waits for it), written to the client here, on the
        broker connection's reader, when it has nothing the gateway changes (Fetch: no partition for the
        tier, no session; Fetch and Produce: no address): a producer's acknowledgement, and the record a
        consumer at the log end waits for, pass two event-loop turns sooner than through the request's task
        and then the writer's (docs/benchmarks.md, the latency bench). Otherwise its bytes go back and the
        handler answers the response as any other."""
        rest = await reader.readexactly(size)
        if _changes(self.header, rest, self.ctx.rule):
            return rest
        correlation = CORRELATION_ID.pack(self.header.correlation_id)
        write_chunks(self.conn.writer, [SIZE.pack(size + 4), correlation, rest])
        self.ctx.metrics.passthrough_bytes.inc(size + 4)
        return None

    def passed(self, response: bytes) -> Chunks:
        """The broker's response as it came, for this request's correlation id."""
        self.ctx.metrics.passthrough_bytes.inc(len(response))
        return framed_with_correlation_id(response, self.header.correlation_id, response=True)

    def answered(self, body: Payload) -> Chunks:
        """``body`` encoded as this request's response."""
        return encode_response(self.header.api_key, self.header.api_version, self.header.correlation_id, body)

    def request(self) -> RequestPayload:
        return decode_request(self.header, self.payload)

    def response(self, payload: bytes) -> ResponsePayload:
        return decode_response(self.header.api_key, self.header.api_version, payload)


NODE_ENDPOINTS_FROM = 10
"""Produce responses name brokers (NodeEndpoints) from this version on."""


def _changes(header: RequestHeader, rest: bytes, rule: PortRule) -> bool:
    """Whether the gateway may change this response (``rest``: its bytes after the correlation id)."""
    api = header.api_key
    if api not in (ApiKey.FETCH, ApiKey.PRODUCE) or not knows(api, header.api_version):
        return False  # forwarded untouched whatever it says
    if api == ApiKey.PRODUCE and header.api_version < NODE_ENDPOINTS_FROM:
        return False
    body = decode_response(api, header.api_version, CORRELATION_ID.pack(header.correlation_id) + rest)
    if api == ApiKey.FETCH:
        fetched = fetch_response(body)
        if fetch_rules.session_id(fetched) != 0 or fetch_rules.out_of_range(fetched):
            return True
    return bool(rewrite_addresses(api, body, rule).brokers)


Handler = Callable[[Call], Awaitable[Chunks | None]]
"""Answers a call: the frame to send the client, or None for no response (Produce acks=0)."""


@dataclass(frozen=True, slots=True)
class Route:
    """An entry of the handler table."""

    handle: Handler
    """Called for the versions the codec reads and writes."""
    unknown_version: Handler | None = None
    """Called for a version the codec does not know; None: such a frame is forwarded undecoded."""


Observer = Callable[[Call, RequestPayload, ResponsePayload], Awaitable[None]]
"""Inspects a request and the broker's response to it; what it returns is ignored, the client gets the
broker's bytes unchanged."""


def observing(observer: Observer) -> Route:
    """A table entry for an API the gateway watches but does not change: the request goes to the broker as
    it came, the broker's response goes back as it came, and ``observer`` sees both decoded. An observer
    that fails is logged and the client is answered all the same: watching must not break a client."""

    async def handle(call: Call) -> Chunks:
        response = await call.roundtrip()
        what = (call.header.api_key, call.header.api_version, call.conn.writer.get_extra_info("peername"))
        try:
            await observer(call, call.request(), call.response(response))
        except ProtocolError as exc:  # the broker judged the bytes already; they pass as they came
            log.warning("observing %s v%s of %s: %s", *what, exc)
        except Exception:
            log.exception("observing %s v%s of %s failed", *what)
        return call.passed(response)

    return Route(handle)
