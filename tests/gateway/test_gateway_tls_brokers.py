"""TLS from the gateway to the brokers: brokers that accept only TLS, reached with the Kafka client
properties the other commands take (security.protocol=SSL, ssl.ca.location), while a plaintext client
reads the tiered history through the gateway from offset 0."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway import GatewayProcess, tier_and_trim
from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_features import read_features

from .conftest import SEGMENT_BYTES, produce, read_all


def test_the_gateway_reads_from_tls_brokers_with_the_kafka_client_properties(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path / "kafka", brokers=1, tls=tmp_path / "pki").start()
    try:
        topic = "tls-history"
        tls = cluster.client_config
        # The operator's version check goes over the same TLS, from the same client properties.
        assert read_features(cluster.bootstrap_servers, tls).metadata_version == "4.1-IV1"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **tls})
        config = {"internal.segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
        admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(60)
        cluster.wait_topic(topic, 1)
        produce(cluster, topic, 1500, 1, **tls)
        expected = read_all(cluster.bootstrap_servers, topic, 1, **tls)
        flags = [f"--kafka-property={key}={value}" for key, value in tls.items()]
        remote = f"file://{tmp_path / 'tier'}"
        tier_and_trim(cluster, ["--remote", remote, *flags], topic)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "probe", **tls})
        log_start = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[0]
        consumer.close()
        assert log_start > 0, "the trim left the history on the broker"

        gateway = GatewayProcess(cluster.bootstrap_servers, remote, tmp_path / "gateway", extra=flags).start()
        try:
            assert read_all(gateway.bootstrap, topic, 1) == expected  # plaintext to the gateway
            assert gateway.metric("tierkeeper_gateway_tier_bytes_total") > 0
        finally:
            gateway.stop()
    finally:
        cluster.stop()
