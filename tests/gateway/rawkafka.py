"""A Kafka client on a raw socket, for tests that need to control every byte a client sends (the gateway's
own codec writes the requests and reads the responses)."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from typing import Any

from storage_core.gateway.protocol import (
    RequestHeader,
    decode_response,
    encode_request,
    request_type,
    response_correlation_id,
)

API_VERSIONS, METADATA, FETCH, LIST_OFFSETS = 18, 3, 1, 2
FETCH_VERSION = 12
"""Topics by name (v4-12): no topic ids to look up."""


def frame(api_key: int, version: int, body: Any, correlation_id: int, client_id: str = "raw") -> bytes:
    header = RequestHeader(api_key, version, correlation_id, client_id, 0)
    return b"".join(bytes(c) for c in encode_request(header, body, correlation_id))


def module_of(api_key: int, version: int) -> Any:
    import sys

    return sys.modules[request_type(api_key, version).__module__]


def api_versions_frame(correlation_id: int) -> bytes:
    return frame(
        API_VERSIONS,
        3,
        request_type(API_VERSIONS, 3)(client_software_name="raw", client_software_version="1"),
        correlation_id,
    )


def metadata_frame(topic: str, correlation_id: int) -> bytes:
    m = module_of(METADATA, 12)
    body = m.MetadataRequest(
        topics=(m.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return frame(METADATA, 12, body, correlation_id)


def fetch_frame(
    topic: str,
    offsets: dict[int, int],
    correlation_id: int,
    *,
    partition_max_bytes: int = 1 << 20,
    max_bytes: int = 50 << 20,
    max_wait_ms: int = 100,
    session_id: int = 0,
    session_epoch: int = -1,
) -> bytes:
    """A Fetch of ``offsets`` (partition -> offset); sessionless unless a session id and epoch are given
    (KIP-227: id 0 and epoch 0 ask the broker to create one)."""
    import datetime

    m = module_of(FETCH, FETCH_VERSION)
    body = m.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=(
            m.FetchTopic(
                topic=topic,
                partitions=tuple(
                    m.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=partition_max_bytes)
                    for p, o in offsets.items()
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    return frame(FETCH, FETCH_VERSION, body, correlation_id)


def list_offsets_frame(topic: str, partition: int, timestamp: int, correlation_id: int) -> bytes:
    m = module_of(LIST_OFFSETS, 9)
    body = m.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            m.ListOffsetsTopic(
                name=topic,
                partitions=(m.ListOffsetsPartition(partition_index=partition, timestamp=timestamp),),
            ),
        ),
    )
    return frame(LIST_OFFSETS, 9, body, correlation_id)


class RawClient:
    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @classmethod
    def at(cls, address: str, timeout: float = 30.0) -> RawClient:
        host, port = address.rsplit(":", 1)
        return cls(host, int(port), timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_payload(self) -> bytes | None:
        """The next response payload, or None when the gateway closed the connection (reset included)."""
        head = self._exactly(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes | None:
        out = bytearray()
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            out += chunk
        return bytes(out)

    def call(self, api_key: int, version: int, data: bytes) -> Any:
        """Send one request frame and decode its response."""
        self.send(data)
        payload = self.read_payload()
        assert payload is not None, "the gateway closed the connection"
        return decode_response(api_key, version, payload)

    def handshake(self) -> None:
        assert self.call(API_VERSIONS, 3, api_versions_frame(1)).error_code == 0

    def closed_by_peer(self, deadline_s: float = 30.0) -> bool:
        """True when the gateway closes the connection before the deadline, with nothing (or only whole
        responses, which are skipped) sent first; False when it is still open at the deadline."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            self.sock.settimeout(max(end - time.monotonic(), 0.01))
            try:
                if self.read_payload() is None:
                    return True
            except TimeoutError:
                return False
        return False

    def close(self, reset: bool = False) -> None:
        if reset:  # RST instead of FIN: the gateway's next write fails
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


def leaders(client: RawClient, topic: str) -> tuple[dict[int, int], dict[int, str]]:
    """(partition -> leader node id, node id -> the address the gateway advertises for it)."""
    body = client.call(METADATA, 12, metadata_frame(topic, 2))
    (t,) = body.topics
    return (
        {p.partition_index: p.leader_id for p in t.partitions},
        {b.node_id: f"{b.host}:{b.port}" for b in body.brokers},
    )


def correlation_of(payload: bytes) -> int:
    return response_correlation_id(payload)


def new_group() -> str:
    return f"raw-{uuid.uuid4().hex[:8]}"
