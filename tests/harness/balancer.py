"""A stand-in for a Kubernetes Service in front of several gateway replicas, and a naive byte pipe.

:class:`Balancer` listens on ``127.0.0.1`` at each of its ports and sends each new connection to the next
backend in service (round robin), at the same port on the backend's own loopback address (``127.0.0.2``,
``127.0.0.3``, ...: every replica listens on the same ports, as pods behind a Service do, and advertises
the balancer's address, as pods advertise the Service's). What a kube-proxy does, and no more:

- a backend taken out of service (:meth:`Balancer.take_out`: its readiness probe failed, or it is being
  terminated) gets no new connection; the connections it has stay until either end closes them;
- a backend that is in service but not listening (SIGKILLed, not yet noticed) refuses: the client's
  connection is accepted and closed at once, as a refused SYN looks to a client behind a Service;
- bytes are copied both ways unchanged; when either end closes, both are closed.

:func:`pipe` is the same copy loop for one backend address in a process of its own, a naive proxy (no
parsing) as the floor any proxy pays in a latency comparison.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future

CHUNK = 256 << 10


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def _splice(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    server_reader: asyncio.StreamReader,
    server_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until either side ends, then close both."""
    ups = asyncio.ensure_future(_copy(client_reader, server_writer))
    downs = asyncio.ensure_future(_copy(server_reader, client_writer))
    await asyncio.wait({ups, downs}, return_when=asyncio.FIRST_COMPLETED)
    for task in (ups, downs):
        task.cancel()
    for writer in (client_writer, server_writer):
        writer.close()
        with contextlib.suppress(OSError, asyncio.CancelledError):
            await writer.wait_closed()


class _LoopThread:
    """An event loop in a daemon thread, for a test (itself synchronous) to run servers on."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro_fn: Callable[[], object], timeout: float = 30.0) -> object:
        async def run() -> object:
            result = coro_fn()
            return await result if asyncio.iscoroutine(result) else result

        future: Future[object] = asyncio.run_coroutine_threadsafe(run(), self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)


class Balancer:
    """Round robin of new connections over the backends in service, per port (see the module's text)."""

    def __init__(self, ports: Iterable[int], backends: Iterable[str], host: str = "127.0.0.1") -> None:
        self.host = host
        self.ports = sorted(set(ports))
        self.backends = list(backends)
        self._in_service = list(self.backends)
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self.connections: Counter[str] = Counter()
        """Connections sent to each backend (refused ones included)."""
        self.refused: Counter[str] = Counter()
        self._servers: list[asyncio.Server] = []
        self._loop = _LoopThread("balancer")

    def start(self) -> Balancer:
        async def listen() -> None:
            for port in self.ports:
                server = await asyncio.start_server(
                    lambda r, w, port=port: self._serve(port, r, w), self.host, port
                )
                self._servers.append(server)

        self._loop.call(listen)
        return self

    def stop(self) -> None:
        def close() -> None:
            for server in self._servers:
                server.close()

        self._loop.call(close)
        self._loop.stop()

    def take_out(self, backend: str) -> None:
        """No new connection goes to ``backend`` (readiness failed, or the pod is terminating)."""
        with self._lock:
            self._in_service.remove(backend)

    def put_back(self, backend: str) -> None:
        with self._lock:
            if backend not in self._in_service:
                self._in_service.append(backend)

    def _choose(self) -> str | None:
        with self._lock:
            if not self._in_service:
                return None
            backend = self._in_service[next(self._turn) % len(self._in_service)]
            self.connections[backend] += 1
            return backend

    async def _serve(self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = self._choose()
        try:
            if backend is None:
                raise ConnectionRefusedError("no backend in service")
            server_reader, server_writer = await asyncio.open_connection(backend, port)
        except OSError:
            if backend is not None:
                with self._lock:
                    self.refused[backend] += 1
            writer.transport.abort()  # a reset, as a refused connection behind a Service looks
            return
        await _splice(reader, writer, server_reader, server_writer)


@contextlib.contextmanager
def pipe(
    listen_port: int, target_host: str, target_port: int, host: str = "127.0.0.1"
) -> Iterator[subprocess.Popen[bytes]]:
    """A naive byte pipe from ``host:listen_port`` to ``target_host:target_port`` while the block runs, in
    a process of its own (as the gateway is: in the measuring process it would share its interpreter
    lock); the block gets the process. asyncio's TCP transports set TCP_NODELAY, as the gateway's do."""
    import sys
    from pathlib import Path

    from harness.ports import wait_port

    tests = str(Path(__file__).resolve().parent.parent)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.balancer", host, str(listen_port), target_host, str(target_port)],
        cwd=tests,
    )
    try:
        if not wait_port(listen_port, 60, host):
            raise RuntimeError(f"the byte pipe did not listen on {host}:{listen_port}")
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)


async def _pipe_forever(host: str, listen_port: int, target_host: str, target_port: int) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            writer.transport.abort()
            return
        await _splice(reader, writer, server_reader, server_writer)

    server = await asyncio.start_server(serve, host, listen_port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":  # python -m harness.balancer HOST PORT TARGET_HOST TARGET_PORT: the byte pipe
    import sys

    listen_host, listen, target, target_port_ = sys.argv[1:5]
    asyncio.run(_pipe_forever(listen_host, int(listen), target, int(target_port_)))
