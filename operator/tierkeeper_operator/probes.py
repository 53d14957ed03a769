"""The operator's readiness: what it knows about itself, and a tiny HTTP endpoint that says it.

Liveness is kopf's (``--liveness``, its ``/healthz``: the event loop answers and the probe handlers pass,
among them "the rounds thread is alive"). Readiness (``--readiness``) says the operator is of use: its
last check reached the API server, and it either ran a reconcile round since it started or is a standby
replica that knows it is one (a standby that reports not-ready would stall a rolling update forever).
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ReadyState:
    """Written by the rounds thread, read by the probe server (a lock keeps each snapshot whole)."""

    connected: bool = False
    rounds: int = 0
    role: str = "starting"
    detail: str = "no round yet"
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def round_ran(self) -> None:
        with self._lock:
            self.connected, self.role, self.detail = True, "active", "last round succeeded"
            self.rounds += 1

    def standby(self, why: str) -> None:
        with self._lock:
            self.connected, self.role, self.detail = True, "standby", why

    def failed(self, why: str) -> None:
        with self._lock:
            self.connected, self.detail = False, why

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            ready = self.connected and (self.rounds > 0 or self.role == "standby")
            return {
                "ready": ready,
                "role": self.role,
                "rounds": self.rounds,
                "connected": self.connected,
                "detail": self.detail,
            }


def serve_readiness(endpoint: str, state: ReadyState) -> ThreadingHTTPServer:
    """Serve ``state`` at ``endpoint`` (e.g. http://0.0.0.0:8081/readyz): 200 when ready, else 503, with
    the snapshot as JSON either way. Runs on a daemon thread; ``shutdown()`` stops it."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme != "http" or parts.port is None:
        from storage_core.errors import ConfigError

        raise ConfigError(f"--readiness must be http://HOST:PORT/PATH, got {endpoint!r}")
    path = parts.path or "/"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if urllib.parse.urlsplit(self.path).path != path:
                self.send_error(404)
                return
            snapshot = state.snapshot()
            body = json.dumps(snapshot).encode()
            self.send_response(200 if snapshot["ready"] else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: probes come every few seconds
            return

    server = ThreadingHTTPServer((parts.hostname or "0.0.0.0", parts.port), Handler)
    threading.Thread(target=server.serve_forever, name="tierkeeper-readiness", daemon=True).start()
    return server
