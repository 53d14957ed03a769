"""One 3-broker Kafka cluster for the gateway tests, with a topic produced, read directly, tiered and
trimmed by Tierkeeper's own commands, and a gateway in front of it (started once per session: every test
reads through the same gateway, as many clients of one deployment would)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway import GatewayProcess, tier_and_trim
from harness.kafka import KafkaCluster

PARTITIONS = 3
RECORDS = 3000
SEGMENT_BYTES = 65536

Record = tuple[int, int, bytes | None, bytes | None]
"""(partition, offset, key, value)."""


@dataclass
class Tiered:
    cluster: KafkaCluster
    gateway: GatewayProcess
    remote: str
    topic: str
    expected: list[Record]
    """Every record a direct consumer read before the trim, in (partition, offset) order."""
    log_starts: dict[int, int]
    """The brokers' log start offsets after the trim (all above 0)."""


def create_topic(cluster: KafkaCluster, name: str, partitions: int = PARTITIONS, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config})
    settings = {"internal.segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1", **config}
    admin.create_topics([NewTopic(name, partitions, 3, config=settings)])[name].result(60)
    cluster.wait_topic(name, partitions)


def produce(
    cluster: KafkaCluster, topic: str, count: int, partitions: int = PARTITIONS, **config: str
) -> None:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "linger.ms": 5,
            "batch.size": 16384,
            "acks": "all",
            **config,
        }
    )
    for i in range(count):
        producer.produce(
            topic, key=f"k{i}".encode(), value=f"v{i}-{'x' * (i % 300)}".encode(), partition=i % partitions
        )
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def read_all(bootstrap: str, topic: str, partitions: int = PARTITIONS, **config: str) -> list[Record]:
    """Every record of every partition from its earliest offset to its current end, by assignment."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-all-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **config,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[Record] = []
        done: set[int] = {p for p, end in ends.items() if end == 0}
        while len(done) < partitions:
            msg = consumer.poll(30)
            assert msg is not None, f"no record or end of partition within 30 s (done: {sorted(done)})"
            if msg.error():
                assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                if msg.offset() >= ends[msg.partition()] or ends[msg.partition()] == 0:
                    done.add(msg.partition())
                continue
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return sorted(out)
    finally:
        consumer.close()


@pytest.fixture(scope="session")
def gateway_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-gateway"), brokers=3)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def tiered(gateway_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    work: Path = tmp_path_factory.mktemp("gateway")
    remote = f"file://{work / 'tier'}"
    topic = "history"
    create_topic(gateway_cluster, topic)
    produce(gateway_cluster, topic, RECORDS)
    expected = read_all(gateway_cluster.bootstrap_servers, topic)
    assert len(expected) == RECORDS
    tier_and_trim(gateway_cluster, ["--remote", remote], topic)
    consumer = Consumer({"bootstrap.servers": gateway_cluster.bootstrap_servers, "group.id": "probe"})
    log_starts = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[0] for p in range(PARTITIONS)
    }
    consumer.close()
    assert all(start > 0 for start in log_starts.values()), (
        f"the trim left history on the brokers: {log_starts}"
    )
    gateway = GatewayProcess(gateway_cluster.bootstrap_servers, remote, work / "gateway").start()
    try:
        yield Tiered(gateway_cluster, gateway, remote, topic, expected, log_starts)
    finally:
        gateway.stop()
