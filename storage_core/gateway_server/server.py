"""The gateway process: a bootstrap listener, one listener per broker, the broker directory that follows
the cluster, the HTTP endpoint for metrics and readiness, and a graceful shutdown.

Brokers are learned from every response that names them (Metadata, DescribeCluster, FindCoordinator,
NodeEndpoints) and, so that a restarted gateway listens before clients come back with cached metadata,
from the gateway's own discovery at start and every ``discovery_interval_s``. A broker listener opens
before the response naming it reaches the client; a broker that the cluster's full listing has left out
``forget_after`` discoveries in a row loses its listener (connections already open stay).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import ssl
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from storage_core.gateway.addresses import Address
from storage_core.gateway_server.context import GatewayContext
from storage_core.gateway_server.session import ClientSession

log = logging.getLogger("tierkeeper.gateway")


@dataclass(frozen=True)
class Hooks:
    """What the gateway calls out to, each blocking and so run on a thread; None: not done."""

    discover: Callable[[], dict[int, Address]] | None = None
    """The brokers' addresses now, by node id (asked every ``Listen.discovery_interval_s``)."""
    bucket_probe: Callable[[], str | None] | None = None
    """A readiness check of the remote tier: None when fine, else what is wrong."""
    reload: Callable[[], None] | None = None
    """Look whether replaced files (certificates, Kafka client properties) must be loaded again
    (storage_core/gateway_server/reloading.py)."""


@dataclass(frozen=True)
class Listen:
    host: str
    port: int
    client_tls: ssl.SSLContext | None = None
    http: Address | None = None
    discovery_interval_s: float = 30.0
    forget_after: int = 3
    shutdown_grace_s: float = 30.0
    reload_interval_s: float = 30.0


class Gateway:
    def __init__(
        self,
        ctx: GatewayContext,
        listen: Listen,
        hooks: Hooks | None = None,
        tasks: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
    ) -> None:
        """``tasks``: coroutines run in the background from start to stop (the group publisher)."""
        self.ctx = ctx
        self.listen = listen
        self.hooks = hooks or Hooks()
        self._tasks = tuple(tasks)
        self._reloading = asyncio.Lock()
        self._servers: dict[int | None, asyncio.Server] = {}
        self._absent: dict[int, int] = {}
        self._sessions: set[ClientSession] = set()
        self._session_tasks: set[asyncio.Task[None]] = set()
        self._http: asyncio.Server | None = None
        self._background: list[asyncio.Task[None]] = []
        self._listeners_lock = asyncio.Lock()
        self._stopped = asyncio.Event()
        ctx.learn = self.learn

    # ---- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        self._servers[None] = await asyncio.start_server(
            functools.partial(self._serve, None),
            self.listen.host,
            self.listen.port,
            ssl=self.listen.client_tls,
            limit=1 << 20,
        )
        if self.listen.http is not None:
            self._http = await asyncio.start_server(
                self._serve_http, self.listen.http.host, self.listen.http.port
            )
        if self.hooks.discover is not None:
            try:
                await self._discovery_round()
            except Exception as exc:  # noqa: BLE001 - clients' own Metadata teaches the brokers too
                log.warning("broker discovery at start failed: %s", exc)
            self._background.append(asyncio.get_running_loop().create_task(self._discovery_loop()))
        if self.hooks.reload is not None:
            self._background.append(asyncio.get_running_loop().create_task(self._reload_loop()))
        for task in self._tasks:
            self._background.append(asyncio.get_running_loop().create_task(task()))
        log.info(
            "gateway listening: bootstrap %s:%d, broker N at %s:%d+N (%s)",
            self.listen.host,
            self.bound_port(None),
            self.ctx.rule.advertised_host,
            self.ctx.rule.broker_port_base,
            ", ".join(f"{n}->{self.ctx.rule.broker_port(n)}" for n in sorted(self.ctx.brokers))
            or "no broker known yet",
        )

    def bound_port(self, node_id: int | None) -> int:
        server = self._servers[node_id]
        return int(server.sockets[0].getsockname()[1])

    @property
    def http_port(self) -> int | None:
        return None if self._http is None else int(self._http.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop listening, let in-flight requests finish (at most ``shutdown_grace_s``), then close."""
        for server in self._servers.values():
            server.close()
        for task in self._background:
            task.cancel()
        for session in list(self._sessions):
            session.stop_reading()
        if self._session_tasks:
            done, pending = await asyncio.wait(self._session_tasks, timeout=self.listen.shutdown_grace_s)
            for task in pending:
                task.cancel()
        if self._http is not None:
            self._http.close()
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # ---- clients --------------------------------------------------------------------------------
    async def _serve(
        self, node_id: int | None, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        session = ClientSession(self.ctx, node_id, reader, writer)
        self._sessions.add(session)
        task = asyncio.current_task()
        assert task is not None
        self._session_tasks.add(task)
        try:
            await session.run()
        finally:
            self._sessions.discard(session)
            self._session_tasks.discard(task)

    # ---- brokers --------------------------------------------------------------------------------
    async def learn(self, brokers: dict[int, Address], complete: bool) -> None:
        """Record brokers' real addresses and make sure each has a listener before a client hears of it."""
        async with self._listeners_lock:
            for node_id, address in brokers.items():
                self.ctx.brokers[node_id] = address
                self._absent.pop(node_id, None)
                if node_id not in self._servers:
                    port = self.ctx.rule.broker_port(node_id)
                    self._servers[node_id] = await asyncio.start_server(
                        functools.partial(self._serve, node_id),
                        self.listen.host,
                        port,
                        ssl=self.listen.client_tls,
                        limit=1 << 20,
                    )
                    log.info(
                        "broker %d (%s) is served at %s:%d",
                        node_id,
                        address,
                        self.ctx.rule.advertised_host,
                        port,
                    )
            if complete:
                for node_id in [n for n in self._servers if n is not None and n not in brokers]:
                    self._absent[node_id] = self._absent.get(node_id, 0) + 1

    async def _discovery_round(self) -> None:
        assert self.hooks.discover is not None
        brokers = await self.ctx.run_tier(self.hooks.discover)
        await self.learn(brokers, True)
        async with self._listeners_lock:
            for node_id, rounds in list(self._absent.items()):
                if rounds >= self.listen.forget_after:
                    server = self._servers.pop(node_id, None)
                    if server is not None:
                        server.close()
                        log.info("broker %d left the cluster: its listener is closed", node_id)
                    self._absent.pop(node_id)
                    self.ctx.brokers.pop(node_id, None)

    async def _discovery_loop(self) -> None:
        while True:
            await asyncio.sleep(self.listen.discovery_interval_s)
            try:
                await self._discovery_round()
            except Exception as exc:  # noqa: BLE001 - the listeners learned so far keep serving
                log.warning("broker discovery failed: %s", exc)

    # ---- replaced files ---------------------------------------------------------------------------
    async def reload_now(self) -> None:
        """Load again what changed on disk (SIGHUP, and every ``reload_interval_s``)."""
        if self.hooks.reload is None:
            return
        async with self._reloading:
            try:
                await self.ctx.run_tier(self.hooks.reload)
            except Exception as exc:  # noqa: BLE001 - what is loaded keeps serving; the next look tries again
                log.error("looking for replaced certificates and client properties failed: %s", exc)

    async def _reload_loop(self) -> None:
        while True:
            await asyncio.sleep(self.listen.reload_interval_s)
            await self.reload_now()

    # ---- HTTP: /metrics, /healthz, /readyz ------------------------------------------------------
    async def readiness(self) -> dict[str, object]:
        problems: dict[str, str] = {}
        targets = dict(self.ctx.brokers) or dict(enumerate(self.ctx.bootstrap))
        reachable = 0
        for node_id, address in targets.items():
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(address.host, address.port), 5)
                writer.close()
                reachable += 1
            except (TimeoutError, OSError) as exc:
                problems[f"broker {node_id} ({address})"] = str(exc) or "no answer within 5 s"
        if self.hooks.bucket_probe is not None:
            problem = await self.ctx.run_tier(self.hooks.bucket_probe)
            if problem is not None:
                problems["remote tier"] = problem
        return {"ready": reachable > 0 and "remote tier" not in problems, "problems": problems}

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
                pass
            path = line.split(b" ")[1].decode() if line.count(b" ") >= 2 else "/"
            if path.startswith("/metrics"):
                self.ctx.metrics.cache_bytes.set(self.ctx.history.ranges.resident_bytes)
                status, body, kind = 200, self.ctx.metrics.exposition(), "text/plain; version=0.0.4"
            elif path.startswith("/healthz"):
                status, body, kind = 200, b"ok\n", "text/plain"
            elif path.startswith("/readyz"):
                state = await self.readiness()
                status, body, kind = (
                    (200 if state["ready"] else 503),
                    json.dumps(state).encode(),
                    "application/json",
                )
            else:
                status, body, kind = 404, b"not found\n", "text/plain"
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, OSError, IndexError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
