"""Which Kafka a cluster runs, asked with one ApiVersions request written by the project's own codec (kio,
:mod:`storage_core.gateway.protocol`): librdkafka keeps the brokers' ApiVersions answer to itself.

The answer carries the cluster's finalized feature levels (KIP-584): ``metadata.version`` is the level
every broker and controller has agreed to run, and the highest level a broker supports tells its software
release (a broker offers the levels of its own release and older ones). Kafka's protocol has no field for
the brokers' exact software version; the release of the newest supported level is as close as it tells.

ApiVersions is answered before SASL authentication (a client must ask it first), so only TLS is set up
here, from the same client properties the cluster's other clients use.
"""

from __future__ import annotations

import socket
import ssl
import struct
from dataclasses import dataclass

from storage_core.adapters.kafka_tls import client_tls
from storage_core.errors import ConfigError, TierkeeperError
from storage_core.gateway.host_port import parse_addresses

METADATA_VERSION = "metadata.version"

RELEASES = {
    7: "3.3-IV3",
    8: "3.4-IV0",
    9: "3.5-IV0",
    10: "3.5-IV1",
    11: "3.5-IV2",
    12: "3.6-IV0",
    13: "3.6-IV1",
    14: "3.6-IV2",
    15: "3.7-IV0",
    16: "3.7-IV1",
    17: "3.7-IV2",
    18: "3.7-IV3",
    19: "3.7-IV4",
    20: "3.8-IV0",
    21: "3.9-IV0",
    22: "4.0-IV0",
    23: "4.0-IV1",
    24: "4.0-IV2",
    25: "4.0-IV3",
    26: "4.1-IV0",
    27: "4.1-IV1",
    28: "4.2-IV0",
    29: "4.2-IV1",
}
"""``metadata.version`` feature level -> its name, as Kafka 4.1.1's ``MetadataVersion`` lists them (levels
below 7 are ZooKeeper-era versions a KRaft cluster cannot run). A level not listed is shown as its
number."""

API_VERSIONS_VERSION = 3
"""The first version whose answer carries the feature levels (Kafka 2.4 and later answer it)."""


class KafkaFeaturesError(TierkeeperError):
    """The cluster's ApiVersions answer could not be had or read."""


@dataclass(frozen=True)
class KafkaFeatures:
    metadata_level: int | None
    """The finalized ``metadata.version`` level (None: the cluster reports none)."""
    supported_level: int | None
    """The highest ``metadata.version`` level the answering broker supports."""

    @property
    def metadata_version(self) -> str | None:
        return release_name(self.metadata_level)

    @property
    def broker_release(self) -> str | None:
        """The release line of the answering broker's software ("4.1" for 4.1.x)."""
        name = release_name(self.supported_level)
        return name.split("-", 1)[0] if name is not None else None


def release_name(level: int | None) -> str | None:
    if level is None:
        return None
    return RELEASES.get(level, f"level {level}")


def read_features(bootstrap_servers: str, config: dict[str, str], timeout: float = 5.0) -> KafkaFeatures:
    """The feature levels from the first bootstrap address that answers."""
    problems = []
    try:
        tls = client_tls(config)
        addresses = parse_addresses(bootstrap_servers)
    except ConfigError as exc:
        raise KafkaFeaturesError(f"ApiVersions: {exc}") from None
    for address in addresses:
        try:
            payload = _ask(address.host, address.port, tls, timeout)
        except (OSError, ValueError, ssl.SSLError) as exc:
            problems.append(f"{address}: {type(exc).__name__}: {exc}"[:200])
            continue
        return _features(payload)
    raise KafkaFeaturesError(f"ApiVersions: no bootstrap address answered ({'; '.join(problems)})")


def _ask(host: str, port: int, tls: ssl.SSLContext | None, timeout: float) -> bytes:
    from storage_core.gateway.protocol import ApiKey, RequestHeader, build_request, encode_request

    body = build_request(
        ApiKey.API_VERSIONS,
        API_VERSIONS_VERSION,
        client_software_name="tierkeeper-operator",
        client_software_version="1",
    )
    header = RequestHeader(ApiKey.API_VERSIONS, API_VERSIONS_VERSION, 1, "tierkeeper-operator", 0)
    frame = b"".join(encode_request(header, body, 1))
    with socket.create_connection((host, port), timeout=timeout) as raw:
        sock = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
        sock.sendall(frame)
        (size,) = struct.unpack(">i", _read(sock, 4))
        if not 0 < size <= 1 << 20:
            raise ValueError(f"answer of {size} bytes is not an ApiVersions response")
        return _read(sock, size)


def _read(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return bytes(data)


def _features(payload: bytes) -> KafkaFeatures:
    from kio.schema.api_versions.v3.response import ApiVersionsResponse

    from storage_core.gateway.protocol import ApiKey, ProtocolError, decode_response

    try:
        answer = decode_response(ApiKey.API_VERSIONS, API_VERSIONS_VERSION, payload)
    except ProtocolError as exc:
        raise KafkaFeaturesError(f"ApiVersions: {exc}") from None
    assert isinstance(answer, ApiVersionsResponse)  # the version asked (API_VERSIONS_VERSION)
    if answer.error_code.value != 0:
        raise KafkaFeaturesError(f"ApiVersions: the broker answered {answer.error_code.name}")
    finalized = {f.name: int(f.max_version_level) for f in answer.finalized_features}
    supported = {f.name: int(f.max_version) for f in answer.supported_features}
    return KafkaFeatures(finalized.get(METADATA_VERSION), supported.get(METADATA_VERSION))
