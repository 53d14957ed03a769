"""The gateway follows the cluster: a broker that joins gets a listener (and clients hear of it at the
gateway's address), a broker that leaves loses it, without a restart."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient

from harness.gateway import GatewayProcess
from harness.kafka import KafkaCluster

from .rawkafka import METADATA, RawClient, metadata_frame


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def _brokers(bootstrap: str) -> set[int]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).brokers)


def test_a_broker_that_joins_gets_a_listener_and_one_that_leaves_loses_it(
    kafka_cluster_factory: Callable[..., KafkaCluster], tmp_path: Path
) -> None:
    cluster = kafka_cluster_factory(4)
    cluster.stop_broker(4)
    _until(lambda: _brokers(cluster.bootstrap_servers) == {1, 2, 3}, "broker 4 is out of the metadata")
    (tmp_path / "tier").mkdir()
    gateway = GatewayProcess(
        cluster.bootstrap_servers,
        f"file://{tmp_path / 'tier'}",
        tmp_path / "gw",
        extra=["--discovery-interval-seconds", "1"],
    ).start()
    port_of = {n: gateway.port + 1 + n for n in range(1, 5)}
    try:
        assert all(_listening(port_of[n]) for n in (1, 2, 3))
        assert not _listening(port_of[4])

        cluster.start_broker(4)
        _until(lambda: _listening(port_of[4]), "broker 4 gets a listener")
        client = RawClient.at(gateway.bootstrap)
        try:
            metadata = client.call(METADATA, 12, metadata_frame("any", 1))
        finally:
            client.close()
        assert {(b.node_id, b.host, b.port) for b in metadata.brokers} == {
            (n, "127.0.0.1", port_of[n]) for n in (1, 2, 3, 4)
        }

        cluster.stop_broker(4)
        _until(lambda: not _listening(port_of[4]), "broker 4 loses its listener")
        assert all(_listening(port_of[n]) for n in (1, 2, 3))
    finally:
        gateway.stop()
