"""A minimal Kafka wire client for tests that need to see single frames: requests built with the gateway's
own codec (kio, from Kafka's schemas), responses read whole."""

from __future__ import annotations

import socket
import struct
from typing import Any

from storage_core.gateway.protocol import (
    RequestHeader,
    decode_response,
    encode_request,
    request_type,
    response_correlation_id,
)


class Wire:
    def __init__(self, address: str, timeout: float = 30.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._next = 1

    def send(self, api_key: int, version: int, body: Any = None, **fields: Any) -> int:
        """Send ``body`` (a kio request entity), or one built from ``fields``; returns its correlation id."""
        correlation_id = self._next
        self._next += 1
        if body is None:
            body = request_type(api_key, version)(**fields)
        header = RequestHeader(api_key, version, correlation_id, "wire-test", 0)
        self.sock.sendall(b"".join(encode_request(header, body, correlation_id)))
        return correlation_id

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        payload = self.receive_raw()
        return response_correlation_id(payload), decode_response(api_key, version, payload)

    def receive_raw(self) -> bytes:
        (size,) = struct.unpack(">i", self._exactly(4))
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()
