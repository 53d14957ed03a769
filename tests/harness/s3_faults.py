"""A fault-injecting S3 endpoint on loopback: an HTTP proxy in front of the moto server.

Each request is forwarded to moto unchanged, unless a seeded draw picks a fault for it:

- ``error_500``: an S3 ``InternalError`` answer, the request never reaches moto;
- ``slow_down``: a 503 ``SlowDown`` answer, the request never reaches moto;
- ``stall``: no answer until the client gives up and closes the connection (its read timeout, which
  tests set small), the request never reaches moto;
- ``reset``: the connection is reset before the request is forwarded;
- ``reset_after``: the request IS applied by moto, then the connection is reset instead of answering
  (the case that makes a non-idempotent retry dangerous);
- ``short_read``: a GET answer's headers promise the full ``Content-Length`` but only half of the body is
  sent before the connection closes.

No fault depends on time: a stall ends when the client closes its side. ``max_in_a_row`` bounds how many
times in a row one request (method + path + query) is faulted, so a client whose retry bound is larger
always gets through; tests that want the bound exceeded set it high. ``injected`` counts what was done.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

KINDS = ("error_500", "slow_down", "stall", "reset", "reset_after", "short_read")
HOP_BY_HOP = {"connection", "keep-alive", "expect", "proxy-connection", "te", "upgrade"}
STALL_CAP_SECONDS = 300.0  # a safety net only: a client that never times out must not pin a thread forever

_ERROR_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
    "<RequestId>fault-proxy</RequestId></Error>"
)


@dataclass
class FaultPlan:
    """Per-request probabilities of each fault (their sum <= 1), the seed, and the bounds."""

    rates: dict[str, float] = field(default_factory=dict)
    seed: int = 405
    max_in_a_row: int = 2
    caps: dict[str, int] = field(default_factory=dict)
    """At most this many faults of a kind in total (stalls cost a client timeout each)."""
    methods: frozenset[str] | None = None
    """Only requests with these HTTP methods are faulted (None: all)."""

    def __post_init__(self) -> None:
        unknown = set(self.rates) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {KINDS}")
        if sum(self.rates.values()) > 1.0:
            raise ValueError("fault rates add up to more than 1")


class FaultProxy:
    """The proxy server; ``endpoint_url`` replaces moto's in the client's options."""

    def __init__(self, upstream_url: str, plan: FaultPlan) -> None:
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.plan = plan
        self.injected: Counter[str] = Counter()
        self.forwarded = 0
        self._rng = random.Random(plan.seed)
        self._in_a_row: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(30)

    def set_plan(self, plan: FaultPlan) -> None:
        with self._lock:
            self.plan = plan
            self._rng = random.Random(plan.seed)
            self._in_a_row.clear()

    def total_injected(self) -> int:
        with self._lock:
            return sum(self.injected.values())

    def choose(self, method: str, identity: str, has_body: bool) -> str | None:
        """The fault for this request, or None to forward it; counts what it picks."""
        with self._lock:
            plan = self.plan
            if plan.methods is not None and method not in plan.methods:
                return None
            draw = self._rng.random()
            chosen = None
            for kind in KINDS:
                rate = plan.rates.get(kind, 0.0)
                if draw < rate:
                    chosen = kind
                    break
                draw -= rate
            if chosen == "short_read" and not (method == "GET" and has_body):
                chosen = None
            if chosen is not None and self.injected[chosen] >= plan.caps.get(chosen, 1 << 62):
                chosen = None
            if chosen is not None and self._in_a_row[identity] >= plan.max_in_a_row:
                chosen = None
            if chosen is None:
                self._in_a_row.pop(identity, None)
                self.forwarded += 1
            else:
                self._in_a_row[identity] += 1
                self.injected[chosen] += 1
            return chosen


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real S3 endpoints: resets then hit pooled connections
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # pytest would capture thousands of access-log lines

    def _proxy(self) -> None:
        body = self._read_body()
        # A short read can only be aimed at a GET whose answer has a body: the decision is made before
        # forwarding, and a ranged or whole-object GET of an object (not a listing) is what readers do.
        fault = self.server.proxy.choose(self.command, self.path, has_body=self.command == "GET")
        if fault == "error_500":
            return self._answer_error(500, "InternalError", "injected internal error")
        if fault == "slow_down":
            return self._answer_error(503, "SlowDown", "Please reduce your request rate.")
        if fault == "stall":
            return self._stall()
        if fault == "reset":
            return self._reset()
        status, reason, headers, payload = self._forward(body)
        if fault == "reset_after":
            return self._reset()
        if fault == "short_read" and len(payload) >= 2:
            return self._answer(status, reason, headers, payload, send=len(payload) // 2)
        return self._answer(status, reason, headers, payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _proxy

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked_raw()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _read_chunked_raw(self) -> bytes:
        """The chunked body exactly as sent (forwarded with its Transfer-Encoding header unchanged)."""
        raw = bytearray()
        while True:
            line = self.rfile.readline()
            raw += line
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    trailer = self.rfile.readline()
                    raw += trailer
                    if trailer in (b"\r\n", b"\n", b""):
                        return bytes(raw)
            raw += self.rfile.read(size + 2)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        host, port = self.server.proxy.upstream
        conn = http.client.HTTPConnection(host, port, timeout=120)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            conn.request(self.command, self.path, body=body or None, headers=headers)
            response = conn.getresponse()
            payload = response.read()
            kept = [
                (k, v)
                for k, v in response.getheaders()
                if k.lower() not in HOP_BY_HOP and k.lower() != "transfer-encoding"
            ]
            return response.status, response.reason, kept, payload
        finally:
            conn.close()

    def _answer(
        self,
        status: int,
        reason: str,
        headers: list[tuple[str, str]],
        payload: bytes,
        send: int | None = None,
    ) -> None:
        self.send_response_only(status, reason)
        has_length = any(k.lower() == "content-length" for k, _ in headers)
        for key, value in headers:
            self.send_header(key, value)
        if not has_length and self.command != "HEAD":
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if send is None:
            self.wfile.write(payload)
            return
        self.wfile.write(payload[:send])
        self.wfile.flush()
        self._hang_up()

    def _answer_error(self, status: int, code: str, message: str) -> None:
        payload = _ERROR_BODY.format(code=code, message=message).encode()
        headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(payload)))]
        self.close_connection = False
        self._answer(status, "Injected", headers, payload if self.command != "HEAD" else b"")

    def _stall(self) -> None:
        """Answer nothing until the client closes the connection (its read timeout fired)."""
        self.connection.settimeout(STALL_CAP_SECONDS)
        try:
            while self.connection.recv(65536):
                pass
        except OSError:
            pass
        self._hang_up()

    def _reset(self) -> None:
        # SO_LINGER 0: close() sends RST, which the client sees as "connection reset by peer".
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._hang_up()

    def _hang_up(self) -> None:
        self.close_connection = True
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.close()
        except OSError:
            pass


def proxied_options(options: dict[str, Any], proxy: FaultProxy, read_timeout: float = 2.0) -> dict[str, Any]:
    """s3fs options that reach moto through ``proxy``, with a read timeout small enough that a stall
    costs seconds (the client's timeout is what ends a stall, never a sleep of ours)."""
    return {
        **options,
        "client_kwargs": {"endpoint_url": proxy.endpoint_url},
        "config_kwargs": {
            "s3": {"addressing_style": "path"},
            "read_timeout": read_timeout,
            "connect_timeout": 5,
        },
    }


def proxied_cli_flags(url: str, proxy: FaultProxy, read_timeout: float = 2.0) -> list[str]:
    """The same as ``tierkeeper`` flags: the proxy as the endpoint, the timeout as a storage option."""
    import json

    config = {"s3": {"addressing_style": "path"}, "read_timeout": read_timeout, "connect_timeout": 5}
    return [
        "--remote",
        url,
        "--endpoint-url",
        proxy.endpoint_url,
        "--storage-option",
        f"config_kwargs={json.dumps(config)}",
        "--retry-max-delay",
        "0.5",
    ]


def report(test: str, proxy: FaultProxy, **extra: Any) -> None:
    """Append what ``proxy`` injected to ``$TIERKEEPER_FAULT_REPORT`` (one JSON line), when it is set."""
    import json
    import os

    path = os.environ.get("TIERKEEPER_FAULT_REPORT")
    if path:
        with open(path, "a") as out:
            row = {"test": test, "injected": dict(proxy.injected), "forwarded": proxy.forwarded, **extra}
            out.write(json.dumps(row) + "\n")


MIXED_FAULTS = {
    "error_500": 0.04,
    "slow_down": 0.04,
    "stall": 0.02,
    "reset": 0.04,
    "reset_after": 0.04,
    "short_read": 0.06,
}
"""A mix of every fault kind at rates a rebuild or recover survives within the default retry bound."""
