"""A real topic history for the recovery tests, and the real-client reads it is checked with.

The history has several partitions, headers (one with a null value), null keys and values, CreateTime
timestamps, and transactions: committed ones, aborted ones, and an aborted one spanning two partitions,
with plain idempotent records interleaved, so the old log has holes and control records that a restore
must skip. What a real consumer (librdkafka, read_committed) returns from the original topic is the
reference every restored read is compared with.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 3
RECORDS_PER_PARTITION = 2400
SEGMENT_BYTES = "65536"
TXN_SIZE = 60


@dataclass(frozen=True)
class Rec:
    """One record as a Kafka client sees it."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    def content(self) -> tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]:
        """Everything a restore must preserve (the offset may shift)."""
        return self.timestamp, self.key, self.value, self.headers


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storage_core.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )


def start_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "storage_core.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _check(errors: list[object]) -> Callable[[Any, Any], None]:
    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    return on_delivery


def _record(rng: random.Random, i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    key = None if i % 11 == 0 else f"k{i}".encode()
    value = None if i % 89 == 0 else rng.randbytes(rng.randint(60, 220))
    headers: list[tuple[str, bytes | None]] = []
    if i % 4 == 0:
        headers = [("trace", f"t{i}".encode()), ("nullable", None)]
    elif i % 4 == 1:
        headers = [("n", str(i).encode())]
    return key, value, headers


def produce_history(bootstrap: str, topic: str) -> int:
    """Create ``topic`` and fill it; returns how many records were produced (aborted ones included)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"internal.segment.bytes": SEGMENT_BYTES, "message.timestamp.type": "CreateTime"}
    for fut in admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)]).values():
        fut.result(60)
    rng = random.Random(4)
    errors: list[object] = []
    # Recent timestamps, so the recreated topic's default retention keeps what is restored.
    base_ts = int(time.time() * 1000) - 3_600_000
    txp = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx", "linger.ms": 5})
    plain = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "compression.type": "zstd",
        }
    )
    txp.init_transactions(60)
    check = _check(errors)
    produced = 0
    for block in range(RECORDS_PER_PARTITION // TXN_SIZE):
        txp.begin_transaction()
        for p in range(PARTITIONS):
            for j in range(TXN_SIZE):
                i = block * TXN_SIZE + j
                key, value, headers = _record(rng, i)
                producer = plain if j % 3 == 0 else txp  # interleaved non-transactional records
                ts = base_ts + i * 5
                producer.produce(
                    topic, key=key, value=value, headers=headers, partition=p, timestamp=ts, on_delivery=check
                )
                produced += 1
        plain.poll(0)
        assert txp.flush(60) == 0  # all delivered before an abort (librdkafka #4849)
        # Every third transaction is aborted; it spans all partitions, like one a real app aborts.
        (txp.abort_transaction if block % 3 == 1 else txp.commit_transaction)(60)
    assert plain.flush(60) == 0
    assert errors == [], errors[:3]
    return produced


def consume(bootstrap: str, topic: str, partition: int, isolation: str = "read_committed") -> list[Rec]:
    """Every record a real consumer returns from the start of the partition to its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    out: list[Rec] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"consumer error on {topic}-{partition}: {msg.error()}")
            ts_type, ts = msg.timestamp()
            out.append(Rec(msg.offset(), ts, ts_type, msg.key(), msg.value(), tuple(msg.headers() or [])))
        raise AssertionError(f"{topic}-{partition}: no end of partition within 120 s")
    finally:
        consumer.close()


def delete_topic(bootstrap: str, topic: str, timeout: float = 60) -> None:
    """Delete ``topic`` if it exists and wait until Kafka no longer lists it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        for fut in admin.delete_topics([topic], operation_timeout=30).values():
            fut.result(60)
    deadline = time.monotonic() + timeout
    while topic in admin.list_topics(timeout=30).topics:
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} still listed {timeout}s after deletion")
        time.sleep(0.2)


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{topic}"})
    try:
        md = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if md is None or md.error is not None:
            return {}
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in md.partitions
        }
    finally:
        consumer.close()
