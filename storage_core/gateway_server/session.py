"""One client connection: its frames in, its upstream broker connection, its responses out in order.

Every request is forwarded at once to the broker this listener stands for (the bootstrap listener: the
first bootstrap broker that answers), over a connection that belongs to this client connection alone, so
SASL passes through and the broker authenticates and authorizes the client itself. Requests are handled
concurrently (a client may pipeline) and answered in the order they came, as Kafka clients expect.
Frames of APIs nobody intercepts are forwarded without decoding. Whatever goes wrong with a frame or the
broker connection closes this connection only: the client reconnects, the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.errors import TierkeeperError
from storage_core.gateway import fetch as fetch_rules
from storage_core.gateway.addresses import ADDRESS_APIS, rewrite_addresses
from storage_core.gateway.fetch_stream import NeedMore, plain_fetch, tail_is_plain
from storage_core.gateway.protocol import (
    API_VERSIONS,
    CORRELATION_ID,
    SIZE,
    Chunks,
    ProtocolError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    framed_with_correlation_id,
    knows,
    produce_acks,
    read_request_header,
    response_type,
    supported_versions,
)
from storage_core.gateway.versions import offered_versions
from storage_core.gateway_server.context import GatewayContext
from storage_core.gateway_server.frames import read_frame, write_chunks
from storage_core.gateway_server.group_watch import GROUP_APIS, GroupWatch
from storage_core.gateway_server.tier_answers import TierAnswers
from storage_core.gateway_server.upstream import STREAMED, Streamer, Upstream, UpstreamError

log = logging.getLogger("tierkeeper.gateway")

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
INTERCEPTED = frozenset({PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS}) | ADDRESS_APIS
STREAM_MIN_BYTES = 64 << 10
"""Fetch responses from this size on may be streamed (smaller ones cost less whole than in pieces)."""
STREAM_HEAD_BYTES = 4 << 10
"""Read before deciding: a one-partition response's headers fit unless its topic name or aborted
transactions are unusually long (it is then stored and forwarded)."""
STREAM_CHUNK_BYTES = 256 << 10


class ClientSession:
    def __init__(
        self,
        ctx: GatewayContext,
        node_id: int | None,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.ctx = ctx
        self.node_id = node_id
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self._upstream: Upstream | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._order: asyncio.Queue[asyncio.Future[Chunks | None] | None] = asyncio.Queue()
        self._slots = asyncio.Semaphore(ctx.limits.max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        self.tier = TierAnswers(ctx)
        self.groups = GroupWatch(ctx.groups, ctx.metrics) if ctx.groups is not None else None
        self._stopping = False
        self._reading: asyncio.Task[None] | None = None
        self._writing: asyncio.Future[Chunks | None] | None = None
        """The response the writer waits for: only that one may be streamed to the client."""

    # ---- the connection -------------------------------------------------------------------------
    async def run(self) -> None:
        self.ctx.metrics.connections.inc()
        writer_task = asyncio.get_running_loop().create_task(self._write_responses())
        self._reading = asyncio.get_running_loop().create_task(self._read_requests())
        try:
            await self._reading
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the session itself is being cancelled (shutdown past its grace)
            # stop_reading(): no new request; the ones in flight are still answered below
        except ProtocolError as exc:
            self.ctx.metrics.client_errors.inc()
            log.warning("closing client %s: %s", self.peer, exc)
        except (OSError, ssl.SSLError) as exc:
            log.info("client %s: %s", self.peer, exc)
        finally:
            await self._order.put(None)
            with contextlib.suppress(BaseException):
                await writer_task
            for task in list(self._tasks):
                task.cancel()
            if self._upstream is not None:
                await self._upstream.close()
            if self.groups is not None:
                self.groups.close()
            self.writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await self.writer.wait_closed()
            self.ctx.metrics.connections.dec()

    def stop_reading(self) -> None:
        """Take no new request; the ones in flight are answered, then the connection closes."""
        self._stopping = True
        if self._reading is not None:
            self._reading.cancel()

    async def _read_requests(self) -> None:
        while not self._stopping:
            await self._slots.acquire()
            payload = await read_frame(self.reader, self.ctx.limits.max_frame_bytes)
            if payload is None or self._stopping:
                self._slots.release()
                return
            header = read_request_header(payload)
            self.ctx.metrics.request(header.api_key)
            slot: asyncio.Future[Chunks | None] = asyncio.get_running_loop().create_future()
            await self._order.put(slot)
            task = asyncio.get_running_loop().create_task(self._handle(header, payload, slot))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write_responses(self) -> None:
        while True:
            slot = await self._order.get()
            if slot is None:
                return
            self._writing = slot
            try:
                chunks = await slot
            except (TimeoutError, UpstreamError, ProtocolError, TierkeeperError) as exc:
                if isinstance(exc, UpstreamError):
                    self.ctx.metrics.upstream_errors.inc()
                log.warning("closing client %s: %s", self.peer, exc or type(exc).__name__)
                self._stopping = True
                self.writer.close()
                return
            finally:
                self._writing = None
                self._slots.release()
            if chunks:
                write_chunks(self.writer, chunks)
                await self.writer.drain()
            # The client now reads this answer and asks again: its next tier answer is computed meanwhile.
            self.tier.speculate()

    async def _handle(
        self, header: RequestHeader, payload: bytes, slot: asyncio.Future[Chunks | None]
    ) -> None:
        try:
            # No deadline of the gateway's own on a client's request: a JoinGroup waits at the broker for as
            # long as the rebalance takes, and the client's own request timeout covers the rest.
            result = await self._answer(header, payload, slot)
        except asyncio.CancelledError:
            if not slot.done():
                _fail_quietly(slot, UpstreamError("connection closing"))
            raise
        except Exception as exc:  # any failure closes this client's connection, and nothing else
            if not slot.done():
                _fail_quietly(
                    slot,
                    exc
                    if isinstance(exc, (UpstreamError, ProtocolError))
                    else UpstreamError(f"{type(exc).__name__}: {exc}"),
                )
            if not isinstance(exc, (UpstreamError, ProtocolError, asyncio.TimeoutError)):
                log.exception("request %s v%s of %s failed", header.api_key, header.api_version, self.peer)
            return
        if not slot.done():
            slot.set_result(result)

    async def _upstream_conn(self) -> Upstream:
        async with self._connecting:
            if self._upstream is not None and not self._upstream.closed:
                return self._upstream
            if self._upstream is not None:
                raise UpstreamError(f"broker {self._upstream.address}: the connection closed")
            targets = (
                self.ctx.bootstrap
                if self.node_id is None
                else [self.ctx.brokers[self.node_id]]
                if self.node_id in self.ctx.brokers
                else []
            )
            if not targets:
                raise UpstreamError(f"broker {self.node_id}: its address is not known (yet)")
            errors = []
            for address in targets:
                try:
                    self._upstream = await Upstream.connect(
                        address,
                        self.ctx.upstream_tls,
                        timeout_s=self.ctx.limits.connect_timeout_s,
                        max_frame_bytes=self.ctx.limits.max_frame_bytes,
                    )
                    self._watch(self._upstream)
                    return self._upstream
                except UpstreamError as exc:
                    errors.append(str(exc))
            raise UpstreamError("; ".join(errors))

    def _watch(self, upstream: Upstream) -> None:
        """When the broker ends its connection (idle timeout, restart), end the client's too, as a direct
        connection would end: the client reconnects at once instead of finding out on its next request."""

        async def watch() -> None:
            await upstream.gone.wait()
            self.stop_reading()

        task = asyncio.get_running_loop().create_task(watch())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- requests -------------------------------------------------------------------------------
    async def _answer(
        self, header: RequestHeader, payload: bytes, slot: asyncio.Future[Chunks | None]
    ) -> Chunks | None:
        upstream = await self._upstream_conn()
        api = header.api_key
        if api == API_VERSIONS and not knows(api, header.api_version):
            return self._unsupported_api_versions(header)
        if api in GROUP_APIS and self.groups is not None:
            # HOOK (issue 45, group tracking): forwarded and answered as they came, then observed
            # (gateway_server/group_watch.py). Belongs in the handler table as the group APIs' entry.
            response = await self._roundtrip(upstream, payload)
            self.groups.seen(header, payload, response)
            return self._passed(header, response)
        if api not in INTERCEPTED or not knows(api, header.api_version):
            return await self._forward(upstream, header, payload, slot)
        if api == PRODUCE:
            if produce_acks(header, payload) == 0:
                upstream.send(payload, expect_response=False)
                await upstream.drain()
                return None
            if header.api_version < 10:  # no node endpoints before v10
                return await self._forward(upstream, header, payload, slot)
        if api == FETCH:
            return await self._fetch(upstream, header, payload, slot)
        whole = self._whole(header, slot) if api == PRODUCE else None
        response = await self._roundtrip(upstream, payload, whole)
        if response is STREAMED:
            return []
        body = decode_response(api, header.api_version, response)
        changed = False
        if api == API_VERSIONS:
            if body.error_code == ErrorCode.none:
                upstream.broker_versions = {a.api_key: (a.min_version, a.max_version) for a in body.api_keys}
            body, changed = offered_versions(body), True
        elif api == LIST_OFFSETS:
            before = body
            body = await self.tier.list_offsets(upstream, decode_request(header, payload), body)
            changed = body is not before
        if api == METADATA:
            self.tier.learn_topic_ids(body)
        if api in ADDRESS_APIS:
            rewritten = rewrite_addresses(api, body, self.ctx.rule)
            await self.ctx.learned(rewritten.brokers, rewritten.complete)
            changed = changed or rewritten.body is not body
            body = rewritten.body
        if not changed:
            return self._passed(header, response)
        return encode_response(api, header.api_version, header.correlation_id, body)

    async def _forward(
        self, upstream: Upstream, header: RequestHeader, payload: bytes, slot: asyncio.Future[Chunks | None]
    ) -> Chunks:
        response = await self._roundtrip(upstream, payload, self._whole(header, slot))
        return [] if response is STREAMED else self._passed(header, response)

    async def _roundtrip(self, upstream: Upstream, payload: bytes, streamer: Streamer | None = None) -> bytes:
        future = upstream.send(payload, streamer=streamer)
        assert future is not None
        await upstream.drain()
        return await future

    def _passed(self, header: RequestHeader, response: bytes) -> Chunks:
        self.ctx.metrics.passthrough_bytes.inc(len(response))
        return framed_with_correlation_id(response, header.correlation_id, response=True)

    def _unsupported_api_versions(self, header: RequestHeader) -> Chunks:
        """ApiVersions of a version the gateway cannot read: KIP-511's answer (v0, UNSUPPORTED_VERSION and
        the versions of ApiVersions it does know), so the client asks again in one of those."""
        from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
        from kio.static.primitive import i16

        low, high = supported_versions()[API_VERSIONS]
        body = ApiVersionsResponse(
            error_code=ErrorCode.unsupported_version,
            api_keys=(ApiVersion(api_key=i16(API_VERSIONS), min_version=i16(low), max_version=i16(high)),),
        )
        return encode_response(API_VERSIONS, 0, header.correlation_id, body)

    # ---- Fetch ----------------------------------------------------------------------------------
    async def _fetch(
        self, upstream: Upstream, header: RequestHeader, payload: bytes, slot: asyncio.Future[Chunks | None]
    ) -> Chunks:
        request = decode_request(header, payload)
        if fetch_rules.session_id(request) != 0:
            body = fetch_rules.session_not_found(response_type(FETCH, header.api_version))
            return encode_response(FETCH, header.api_version, header.correlation_id, body)
        plain = fetch_rules.sessionless(request)
        served = await self.tier.fetch_under_grants(upstream, header.api_version, plain)
        if served is not None:
            return encode_response(FETCH, header.api_version, header.correlation_id, served)
        if plain is not request:
            payload = b"".join(encode_request(header, plain, header.correlation_id)[1:])
        sent_at = time.monotonic()
        future = upstream.send(payload, streamer=self._streamer(header, slot))
        assert future is not None
        await upstream.drain()
        response = await future
        if response is STREAMED:
            return []
        body = decode_response(FETCH, header.api_version, response)
        changed = fetch_rules.session_id(body) != 0
        out_of_range = fetch_rules.out_of_range(body)
        if out_of_range:
            answers = await self.tier.fetch_answers(upstream, plain, body, out_of_range, sent_at=sent_at)
            if answers:
                body = fetch_rules.with_answers(body, answers)
                changed = True
        rewritten = rewrite_addresses(FETCH, body, self.ctx.rule)
        if rewritten.brokers:
            await self.ctx.learned(rewritten.brokers, False)
            body, changed = rewritten.body, True
        if not changed:
            return self._passed(header, response)
        return encode_response(
            FETCH, header.api_version, header.correlation_id, fetch_rules.without_session(body)
        )

    def _streamer(self, header: RequestHeader, slot: asyncio.Future[Chunks | None]) -> Streamer:
        """Cut-through for a large Fetch response the gateway has nothing to change in: when it is this
        response's turn (every earlier response written, the writer waiting for this one), its bytes go to
        the client as they arrive instead of after the whole response has (storage_core/gateway/
        fetch_stream.py decides from its first bytes). A response that stops half-way (the broker died)
        leaves the client a frame shorter than its size and a closed connection, never a whole answer."""
        version = header.api_version

        async def stream(size: int, reader: asyncio.StreamReader) -> bytes | None:
            if self._writing is not slot or slot.done() or self._stopping:
                return b""
            if size < STREAM_MIN_BYTES:
                return await self._pass_whole(header, size, reader)
            head = await reader.readexactly(min(size, STREAM_HEAD_BYTES))
            try:
                plain = plain_fetch(version, head)
            except NeedMore:  # a partition header longer than the first bytes read: stored and forwarded
                return head
            if plain is None or plain.records_end > size or len(head) > plain.records_end:
                return head
            self.writer.write(SIZE.pack(size + 4) + CORRELATION_ID.pack(header.correlation_id) + head)
            left = plain.records_end - len(head)
            while left > 0:
                chunk = await reader.read(min(left, STREAM_CHUNK_BYTES))
                if not chunk:
                    raise asyncio.IncompleteReadError(b"", left)
                self.writer.write(chunk)
                left -= len(chunk)
                await self.writer.drain()
            tail = await reader.readexactly(size - plain.records_end)
            if not tail_is_plain(version, tail):
                # Addresses to rewrite after records already sent (no broker does this for an error-free
                # partition): the client gets a cut frame and a closed connection, never an unrewritten one.
                raise ProtocolError("a streamed Fetch response ended with NodeEndpoints; closing the client")
            self.writer.write(tail)
            await self.writer.drain()
            self.ctx.metrics.passthrough_bytes.inc(size + 4)
            self.ctx.metrics.streamed_responses.inc()
            return None

        return stream

    def _whole(self, header: RequestHeader, slot: asyncio.Future[Chunks | None]) -> Streamer:
        """:meth:`_pass_whole` for a response the gateway forwards as it is (Produce, APIs nobody
        intercepts), when it is that response's turn."""

        async def take(size: int, reader: asyncio.StreamReader) -> bytes | None:
            if size >= STREAM_MIN_BYTES or self._writing is not slot or slot.done() or self._stopping:
                return b""
            return await self._pass_whole(header, size, reader)

        return take

    async def _pass_whole(
        self, header: RequestHeader, size: int, reader: asyncio.StreamReader
    ) -> bytes | None:
        """A small response whose turn it is (the writer waits for it), written to the client here, on the
        broker connection's reader, when it has nothing the gateway changes (Fetch: no partition for the
        tier, no session; Fetch and Produce: no address): a producer's acknowledgement, and the record a
        consumer at the log end waits for, pass two event-loop turns sooner than through the request's task
        and then the writer's (docs/benchmarks.md, the latency bench). Otherwise its bytes go back and the
        request's task handles the response as any other."""
        rest = await reader.readexactly(size)
        if self._changes(header, rest):
            return rest
        write_chunks(self.writer, [SIZE.pack(size + 4), CORRELATION_ID.pack(header.correlation_id), rest])
        self.ctx.metrics.passthrough_bytes.inc(size + 4)
        return None

    def _changes(self, header: RequestHeader, rest: bytes) -> bool:
        """Whether the gateway may change this response (``rest``: its bytes after the correlation id)."""
        api = header.api_key
        if api not in (FETCH, PRODUCE) or not knows(api, header.api_version):
            return False  # forwarded untouched whatever it says
        if api == PRODUCE and header.api_version < 10:  # no node endpoints before v10
            return False
        body = decode_response(api, header.api_version, CORRELATION_ID.pack(header.correlation_id) + rest)
        if api == FETCH and (fetch_rules.session_id(body) != 0 or fetch_rules.out_of_range(body)):
            return True
        return bool(rewrite_addresses(api, body, self.ctx.rule).brokers)


def _fail_quietly(future: asyncio.Future[Any], error: BaseException) -> None:
    """Fail a future that nobody may wait for any more (its connection is closing): whoever still awaits
    it gets the error, and asyncio does not log it as never retrieved."""
    future.set_exception(error)
    future.exception()  # marks it retrieved
