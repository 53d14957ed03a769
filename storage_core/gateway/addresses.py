"""Broker addresses: which gateway port stands for which broker, and the rewriting of every response that
names a broker, so a client never learns an address behind the gateway.

Port rule (port-per-broker, as Kroxylicious calls it): the bootstrap listener is ``bootstrap_port``; the
broker with node id N is ``broker_port_base + N``. Node ids are stable in a KRaft cluster, so a client's
cached metadata stays valid across gateway restarts.

Responses that carry broker addresses: Metadata (brokers), FindCoordinator (v0-3 one node, v4+
coordinators), DescribeCluster (brokers), Fetch v16+ and Produce v10+ (``node_endpoints``, the new leaders
of partitions that moved). Share-group APIs also carry them; the gateway does not offer those APIs
(versions.py), so no address can pass it unrewritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from kio.static.protocol import Entity, ResponsePayload

from storage_core.errors import ConfigError
from storage_core.gateway.messages import describe_cluster_response, metadata_response
from storage_core.gateway.protocol import ApiKey, replaced

ADDRESS_APIS = frozenset(
    {ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER, ApiKey.FETCH, ApiKey.PRODUCE}
)
MAX_PORT = 65535
_R = TypeVar("_R", bound=Entity)


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        """``HOST:PORT`` as :func:`storage_core.gateway.host_port.parse_address` reads it back: an IPv6 host
        in brackets, as Kafka's configs write one."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PortRule:
    advertised_host: str
    bootstrap_port: int
    broker_port_base: int

    def broker_port(self, node_id: int) -> int:
        port = self.broker_port_base + node_id
        if node_id < 0 or port > MAX_PORT:
            raise ConfigError(
                f"broker {node_id} has no gateway port: {self.broker_port_base} + {node_id} is not a TCP "
                "port; choose a lower --broker-port-base"
            )
        return port

    def broker_address(self, node_id: int) -> Address:
        return Address(self.advertised_host, self.broker_port(node_id))


@dataclass(frozen=True, slots=True)
class Rewritten:
    body: ResponsePayload
    """The response with every broker address replaced (the same object when nothing named a broker)."""
    brokers: dict[int, Address]
    """The real addresses the response named, by node id (for routing the gateway's broker listeners)."""
    complete: bool
    """True when ``brokers`` lists the whole cluster (Metadata, DescribeCluster), so absent ones are gone."""


def rewrite_addresses(api_key: int, body: ResponsePayload, rule: PortRule) -> Rewritten:
    """The response ``body`` (a kio entity of ``api_key``) with broker addresses pointing at the gateway."""
    if api_key == ApiKey.METADATA:
        brokers = {int(b.node_id): Address(b.host, b.port) for b in metadata_response(body).brokers}
        return Rewritten(_replace_each(body, "brokers", "node_id", rule), brokers, True)
    if api_key == ApiKey.DESCRIBE_CLUSTER:
        # endpoint_type 2 lists controllers (bootstrap.controllers clients), which do not come through here.
        brokers = {int(b.broker_id): Address(b.host, b.port) for b in describe_cluster_response(body).brokers}
        return Rewritten(_replace_each(body, "brokers", "broker_id", rule), brokers, True)
    if api_key == ApiKey.FIND_COORDINATOR:
        # v4+ lists coordinators (KIP-699); v0-3 are one node, in fields v4 does not have: read by name.
        coordinators = getattr(body, "coordinators", None)
        if coordinators is not None:
            brokers = {int(c.node_id): Address(c.host, c.port) for c in coordinators if c.node_id >= 0}
            return Rewritten(_replace_each(body, "coordinators", "node_id", rule), brokers, False)
        node_id, host, port = (getattr(body, name) for name in ("node_id", "host", "port"))
        if node_id < 0:
            return Rewritten(body, {}, False)
        target = rule.broker_address(node_id)
        return Rewritten(
            replaced(body, host=target.host, port=target.port), {node_id: Address(host, port)}, False
        )
    endpoints = getattr(body, "node_endpoints", None)  # Fetch v16+, Produce v10+
    if api_key in (ApiKey.FETCH, ApiKey.PRODUCE) and endpoints:
        brokers = {int(n.node_id): Address(n.host, n.port) for n in endpoints}
        return Rewritten(_replace_each(body, "node_endpoints", "node_id", rule), brokers, False)
    return Rewritten(body, {}, False)


def _replace_each(body: _R, field: str, id_field: str, rule: PortRule) -> _R:
    items = []
    for item in getattr(body, field):
        node_id = getattr(item, id_field)
        if node_id < 0:  # "no coordinator": nothing to point anywhere
            items.append(item)
            continue
        target = rule.broker_address(node_id)
        items.append(replaced(item, host=target.host, port=target.port))
    return replaced(body, **{field: tuple(items)})
