"""The cluster's Kafka version, asked with an ApiVersions request of the project's own codec: a real
4.1.1 broker of the harness, and the one-line refusal where nothing answers."""

from __future__ import annotations

import socket

import pytest

from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_features import KafkaFeaturesError, read_features


def test_a_4_1_broker_reports_its_finalized_metadata_version(kafka_broker: KafkaCluster) -> None:
    features = read_features(kafka_broker.bootstrap_servers, {})
    assert (features.metadata_level, features.metadata_version) == (27, "4.1-IV1")
    assert features.broker_release == "4.1"


def test_no_answer_is_one_line_naming_each_address() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(KafkaFeaturesError, match=rf"127\.0\.0\.1:{port}: ConnectionRefusedError"):
            read_features(f"127.0.0.1:{port}", {}, timeout=2)
