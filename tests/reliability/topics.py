"""A small real topic with several rolled segments, for the refusal and secret tests."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster

SMALL_SEGMENTS = {"internal.segment.bytes": "65536", "retention.ms": "-1"}


def create_topic(cluster: KafkaCluster, config: dict[str, str], partitions: int = 1) -> str:
    """Create a topic with ``config`` and write ~200 KB of keyed records: several 64 KiB segments roll."""
    topic = f"rel-{uuid.uuid4().hex[:8]}"
    client = {"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config}
    admin = AdminClient(client)
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(60)
    cluster.wait_topic(topic, partitions)
    # Small batches: a segment rolls only between batches, and librdkafka's default batch is 1 MB.
    producer = Producer({**client, "linger.ms": 5, "batch.size": 16384})
    for i in range(3000):  # keyed, since compaction needs keys
        producer.produce(topic, key=f"k{i % 50}".encode(), value=b"v" * 60, partition=i % partitions)
    assert producer.flush(60) == 0
    return topic
