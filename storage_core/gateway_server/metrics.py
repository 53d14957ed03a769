"""The gateway's Prometheus metrics, in a registry of its own (no process-global state)."""

from __future__ import annotations

from functools import partial
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from storage_core.gateway.protocol import api_name


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        counter = partial(Counter, registry=self.registry)
        gauge = partial(Gauge, registry=self.registry)
        self.requests = counter("tierkeeper_gateway_requests", "Client requests handled, by API", ["api"])
        self.tier_bytes = counter("tierkeeper_gateway_tier_bytes", "Record bytes served from the remote tier")
        self.passthrough_bytes = counter(
            "tierkeeper_gateway_passthrough_bytes", "Response bytes passed from the brokers to clients"
        )
        self.tier_partitions = counter(
            "tierkeeper_gateway_tier_fetches",
            "Partition fetches answered from the remote tier, by outcome",
            ["outcome"],
        )
        self.granted_fetches = counter(
            "tierkeeper_gateway_granted_fetches",
            "Fetches answered wholly from the remote tier under the broker's recent answer, without a broker "
            "round trip",
        )
        self.streamed_responses = counter(
            "tierkeeper_gateway_streamed_responses",
            "Fetch responses passed to the client as they arrived (cut-through)",
        )
        self.remote_read_seconds = Histogram(
            "tierkeeper_gateway_remote_read_seconds",
            "Time to read one partition's answer from the remote tier",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.cache_lookups = counter(
            "tierkeeper_gateway_cache_lookups",
            "Read-ahead cache lookups of remote blocks, by result",
            ["result"],
        )
        self.upstream_errors = counter(
            "tierkeeper_gateway_upstream_errors", "Broker connections that failed or closed under a client"
        )
        self.client_errors = counter(
            "tierkeeper_gateway_client_protocol_errors",
            "Client connections closed for a malformed or oversized frame",
        )
        self.reloads = counter(
            "tierkeeper_gateway_reloads",
            "Certificates and Kafka client properties loaded again after their files changed, by outcome",
            ["what", "outcome"],
        )
        self.group_requests_unread = counter(
            "tierkeeper_gateway_group_requests_unread",
            "Consumer-group requests passed through that group tracking could not read, by API (their "
            "members are not recorded as carried)",
            ["api"],
        )
        self.group_sightings_written = counter(
            "tierkeeper_gateway_group_sightings_written",
            "Group sightings Kafka acknowledged on the sightings topic (__tierkeeper_gateway_groups)",
        )
        self.group_sightings_failures = counter(
            "tierkeeper_gateway_group_sightings_failures",
            "Failed attempts to create the sightings topic or write sightings to it, by stage (retried)",
            ["stage"],
        )
        self.cache_bytes = gauge("tierkeeper_gateway_cache_bytes", "Bytes held by the read-ahead cache")
        self.connections = gauge("tierkeeper_gateway_client_connections", "Open client connections")
        self.groups_carried = gauge(
            "tierkeeper_gateway_groups_carried", "Consumer groups with a member on this gateway's connections"
        )
        # Labelled children looked up once: ``labels()`` on every request and read was ~2% of the busy time
        # of a gateway serving history.
        self._requests_by_api: dict[int, Any] = {}
        self._lookups = {
            hit: self.cache_lookups.labels(result="hit" if hit else "miss") for hit in (True, False)
        }
        self.tier_served = self.tier_partitions.labels(outcome="served")

    def request(self, api_key: int) -> None:
        child = self._requests_by_api.get(api_key)
        if child is None:
            child = self._requests_by_api[api_key] = self.requests.labels(api=api_name(api_key))
        child.inc()

    def reloaded(self, what: str, ok: bool) -> None:
        self.reloads.labels(what=what, outcome="loaded" if ok else "failed").inc()

    def cache_lookup(self, hit: bool) -> None:
        self._lookups[hit].inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
