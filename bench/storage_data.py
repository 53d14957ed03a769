"""The storage benchmark's data: one partition of about 1 GiB produced into a real Kafka broker.

Values are slices of a random pool (incompressible, cheap to make), keys are short strings, no
compression: the segment bytes on disk are what the producer sent, so the copy and read benchmarks
move real Kafka segments of a known size.
"""

from __future__ import annotations

import random
import time
from typing import NamedTuple

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

POOL_BYTES = 4 << 20


class Produced(NamedTuple):
    topic: str
    records: int
    value_bytes: int
    seconds: float


def create_topic(bootstrap: str, topic: str, segment_bytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {
        "segment.bytes": str(segment_bytes),
        "compression.type": "producer",
        "message.timestamp.type": "CreateTime",
        "retention.ms": "-1",
        "retention.bytes": "-1",
    }
    for fut in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
        fut.result(60)


def produce(
    bootstrap: str,
    topic: str,
    total_bytes: int,
    *,
    value_bytes: int = 1000,
    batch_bytes: int = 1_000_000,
    seed: int = 405,
) -> Produced:
    """Produce records of ``value_bytes`` values into partition 0 until ``total_bytes`` of values are sent.

    ``batch_bytes`` is librdkafka's ``batch.size`` (its default, 1 MB, is what a throughput-minded producer
    sends; the Java client's 16 KiB default gives 60x more batches and is measured separately).
    """
    rng = random.Random(seed)
    pool = rng.randbytes(POOL_BYTES)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": batch_bytes,
            "compression.type": "none",
            "acks": "all",
            "queue.buffering.max.kbytes": 262144,
        }
    )
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    started = time.monotonic()
    count = 0
    sent = 0
    span = POOL_BYTES - value_bytes
    while sent < total_bytes:
        start = (count * 7919) % span
        while True:
            try:
                producer.produce(
                    topic,
                    key=f"key-{count:010d}".encode(),
                    value=pool[start : start + value_bytes],
                    partition=0,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: let librdkafka drain it
        count += 1
        sent += value_bytes
        if count % 2000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    if remaining or errors:
        raise RuntimeError(f"produce failed: {remaining} undelivered, errors {errors[:3]}")
    return Produced(topic, count, value_bytes, time.monotonic() - started)
