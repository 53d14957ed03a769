"""The harness starts a real Kafka broker: produce and consume 1,000 records and find the segments."""

from __future__ import annotations

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster


def test_produce_consume_and_segments_on_disk(kafka_broker: KafkaCluster) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    admin.create_topics([NewTopic("smoke", 1, 1, config={"internal.segment.bytes": "65536"})])[
        "smoke"
    ].result(30)

    # Batches must stay below the 64 KiB segment size, or the broker refuses them. Idempotent: the read
    # is compared with the produce order, which a retried batch of a new topic could otherwise break.
    producer = Producer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "linger.ms": 5,
            "batch.size": 16384,
            "enable.idempotence": True,
        }
    )
    errors: list[object] = []
    sent = [f"value-{i:05d}".encode() * 20 for i in range(1000)]
    for i, value in enumerate(sent):
        producer.produce(
            "smoke",
            key=str(i).encode(),
            value=value,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0
    assert errors == []

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "group.id": "smoke",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition("smoke", 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    while len(got) < len(sent):
        msg = consumer.poll(10)
        assert msg is not None, f"consumer stalled after {len(got)} records"
        assert msg.error() is None, msg.error()
        got.append(msg.value())
    consumer.close()
    assert got == sent

    partition_dir = kafka_broker.log_dir(1) / "smoke-0"
    segments = sorted(partition_dir.glob("*.log"))
    assert len(segments) > 1, "internal.segment.bytes=64KiB should roll several segments"
    assert all(len(s.stem) == 20 and s.stem.isdigit() for s in segments)
    assert (partition_dir / "partition.metadata").read_text().startswith("version: 0\ntopic_id: ")


def test_dump_log_segments_reads_our_segment(kafka_broker: KafkaCluster) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    admin.create_topics([NewTopic("smoke-dump", 1, 1)])["smoke-dump"].result(30)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for i in range(10):
        producer.produce("smoke-dump", value=f"v{i}".encode())
    assert producer.flush(30) == 0
    segment = kafka_broker.log_dir(1) / "smoke-dump-0" / f"{0:020d}.log"
    out = kafka_broker.dump_log_segments([segment])
    assert "baseOffset: 0" in out
    assert out.count("| offset: ") == 10
