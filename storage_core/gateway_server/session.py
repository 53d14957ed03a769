"""One client connection: its frames in, its upstream broker connection, its responses out in order.

Every request is forwarded at once to the broker this listener stands for (the bootstrap listener: the
first bootstrap broker that answers), over a connection that belongs to this client connection alone, so
SASL passes through and the broker authenticates and authorizes the client itself. Requests are handled
concurrently (a client may pipeline) and answered in the order they came, as Kafka clients expect.
Frames of APIs nobody intercepts are forwarded without decoding; the others go to their handler, through
the table in gateway_server/handlers/__init__.py. Whatever goes wrong with a frame or the
broker connection closes this connection only: the client reconnects, the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from typing import Any

from storage_core.errors import TierkeeperError
from storage_core.gateway.grants import Grants
from storage_core.gateway.protocol import Chunks, ProtocolError, RequestHeader, knows, read_request_header
from storage_core.gateway_server.broker_queries import BrokerQueries
from storage_core.gateway_server.call import Call, Connection, Slot, Writing
from storage_core.gateway_server.context import GatewayContext
from storage_core.gateway_server.frames import read_frame, write_chunks
from storage_core.gateway_server.group_watch import GroupWatch
from storage_core.gateway_server.handlers import HANDLERS
from storage_core.gateway_server.tier_answers import TierAnswers
from storage_core.gateway_server.upstream import Upstream, UpstreamError

log = logging.getLogger("tierkeeper.gateway")


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
        self._order: asyncio.Queue[Slot | None] = asyncio.Queue()
        self._slots = asyncio.Semaphore(ctx.limits.max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        self._state = Writing()
        """The answer the writer waits for (only that one may be streamed to the client), and whether the
        connection is closing."""
        self.conn = Connection(
            ctx,
            writer,
            self._state,
            TierAnswers(ctx),
            BrokerQueries(ctx),
            Grants(ctx.limits.grant_s),
            GroupWatch(ctx.groups, ctx.metrics) if ctx.groups is not None else None,
        )
        self._reading: asyncio.Task[None] | None = None

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
            if self.conn.groups is not None:
                self.conn.groups.close()
            self.writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await self.writer.wait_closed()
            self.ctx.metrics.connections.dec()

    def stop_reading(self) -> None:
        """Take no new request; the ones in flight are answered, then the connection closes."""
        self._state.stopping = True
        if self._reading is not None:
            self._reading.cancel()

    async def _read_requests(self) -> None:
        while not self._state.stopping:
            await self._slots.acquire()
            payload = await read_frame(self.reader, self.ctx.limits.max_frame_bytes)
            if payload is None or self._state.stopping:
                self._slots.release()
                return
            header = read_request_header(payload)
            self.ctx.metrics.request(header.api_key)
            slot: Slot = asyncio.get_running_loop().create_future()
            await self._order.put(slot)
            task = asyncio.get_running_loop().create_task(self._handle(header, payload, slot))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write_responses(self) -> None:
        while True:
            slot = await self._order.get()
            if slot is None:
                return
            self._state.slot = slot
            try:
                chunks = await slot
            except (TimeoutError, UpstreamError, ProtocolError, TierkeeperError) as exc:
                if isinstance(exc, UpstreamError):
                    self.ctx.metrics.upstream_errors.inc()
                log.warning("closing client %s: %s", self.peer, exc or type(exc).__name__)
                self._state.stopping = True
                self.writer.close()
                return
            finally:
                self._state.slot = None
                self._slots.release()
            if chunks:
                write_chunks(self.writer, chunks)
                await self.writer.drain()
            # The client now reads this answer and asks again: its next tier answer is computed meanwhile.
            self.conn.tier.speculate()

    async def _handle(self, header: RequestHeader, payload: bytes, slot: Slot) -> None:
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
    async def _answer(self, header: RequestHeader, payload: bytes, slot: Slot) -> Chunks | None:
        upstream = await self._upstream_conn()
        call = Call(header, payload, upstream, self.conn, slot)
        route = HANDLERS.get(header.api_key)
        if route is None:
            return await call.forward()
        if knows(header.api_key, header.api_version):
            return await route.handle(call)
        if route.unknown_version is not None:
            return await route.unknown_version(call)
        return await call.forward()


def _fail_quietly(future: asyncio.Future[Any], error: BaseException) -> None:
    """Fail a future that nobody may wait for any more (its connection is closing): whoever still awaits
    it gets the error, and asyncio does not log it as never retrieved."""
    future.set_exception(error)
    future.exception()  # marks it retrieved
