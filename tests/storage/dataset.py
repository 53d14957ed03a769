"""A real Kafka dataset for the storage tests: every codec, headers, null keys/values, transactions.

Produced once per test module on the real broker; the expected records are read back with a real
Kafka consumer (librdkafka), which is the independent reference our remote reads are compared with.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import NamedTuple

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
SEGMENT_BYTES = 65536
RECORDS_PER_PARTITION = 5000
BASE_TS = 1_700_000_000_000


class Expected(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass
class Dataset:
    bootstrap: str
    prefix: str
    codec_topics: list[str]
    txn_topic: str
    open_txn_topic: str
    partitions: dict[str, int]
    total_records: int
    open_txn_producer: Producer | None = None
    expected: dict[tuple[str, int, str], list[Expected]] = field(default_factory=dict)

    def all_partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, n in self.partitions.items() for p in range(n)]


def _topic_config() -> dict[str, str]:
    # Records carry 2023 timestamps; without retention.ms=-1 the broker's time retention would delete
    # them mid-test (it did: "segment vanished before it was copied").
    return {
        "internal.segment.bytes": str(SEGMENT_BYTES),
        "compression.type": "producer",
        "message.timestamp.type": "CreateTime",
        "retention.ms": "-1",
    }


def _delivery_errors(errors: list[object]):  # type: ignore[no-untyped-def]
    return lambda err, _msg: errors.append(err) if err is not None else None


def _record(rng: random.Random, i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    key = None if i % 13 == 0 else f"key-{i}".encode()
    value = None if i % 97 == 0 else rng.randbytes(rng.randint(40, 260))
    headers: list[tuple[str, bytes | None]] = []
    if i % 3 == 0:
        headers = [("trace", f"t{i}".encode()), ("empty", None)]
    return key, value, headers


def produce_dataset(bootstrap: str, prefix: str) -> Dataset:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    codec_topics = [f"{prefix}-codec-{c}" for c in CODECS]
    txn_topic, open_topic = f"{prefix}-txn", f"{prefix}-txn-open"
    partitions = {**dict.fromkeys(codec_topics, 2), txn_topic: 1, open_topic: 1}
    futures = admin.create_topics([NewTopic(t, n, 1, config=_topic_config()) for t, n in partitions.items()])
    for fut in futures.values():
        fut.result(60)
    rng = random.Random(405)
    errors: list[object] = []
    total = 0
    for codec, topic in zip(CODECS, codec_topics):
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "compression.type": codec,
                "linger.ms": 5,
                "batch.size": 16384,
                "enable.idempotence": codec in ("lz4", "zstd"),
            }
        )
        for p in range(2):
            for i in range(RECORDS_PER_PARTITION):
                key, value, headers = _record(rng, i)
                # Three records share each timestamp, so by-timestamp reads meet ties.
                producer.produce(
                    topic,
                    key=key,
                    value=value,
                    headers=headers,
                    partition=p,
                    timestamp=BASE_TS + (i // 3) * 10,
                    on_delivery=_delivery_errors(errors),
                )
                total += 1
                if i % 1000 == 0:
                    producer.poll(0)
        assert producer.flush(60) == 0
    total += _produce_transactions(bootstrap, txn_topic, rng, errors)
    open_producer, n = _produce_open_transaction(bootstrap, open_topic, rng, errors)
    total += n
    assert errors == [], errors[:3]
    return Dataset(bootstrap, prefix, codec_topics, txn_topic, open_topic, partitions, total, open_producer)


def _produce_transactions(bootstrap: str, topic: str, rng: random.Random, errors: list[object]) -> int:
    """40 transactions of 250 records, every third aborted, with plain records interleaved."""
    txp = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"{topic}-tx",
            "linger.ms": 5,
            "batch.size": 16384,
            "compression.type": "lz4",
        }
    )
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
    txp.init_transactions(60)
    n = 0
    for t in range(40):
        txp.begin_transaction()
        for i in range(250):
            key, value, headers = _record(rng, n)
            txp.produce(
                topic,
                key=key,
                value=value,
                headers=headers,
                partition=0,
                timestamp=BASE_TS + n * 10,
                on_delivery=_delivery_errors(errors),
            )
            n += 1
            if i % 50 == 0:
                plain.produce(
                    topic,
                    key=b"plain",
                    value=rng.randbytes(100),
                    partition=0,
                    timestamp=BASE_TS + n * 10,
                    on_delivery=_delivery_errors(errors),
                )
                plain.poll(0)
                n += 1
        assert txp.flush(60) == 0  # all delivered before an abort (librdkafka #4849)
        (txp.abort_transaction if t % 3 == 2 else txp.commit_transaction)(60)
    assert plain.flush(60) == 0
    return n


def _produce_open_transaction(
    bootstrap: str, topic: str, rng: random.Random, errors: list[object]
) -> tuple[Producer, int]:
    """Committed data, then a transaction left open, then plain data that rolls segments past it."""
    txp = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"{topic}-tx",
            "linger.ms": 5,
            "batch.size": 16384,
            # Open until the module's teardown aborts it, however long the module takes (the harness's
            # brokers allow a day; 15 minutes ran out in a loaded stress run).
            "transaction.timeout.ms": 24 * 3600 * 1000,
        }
    )
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
    txp.init_transactions(60)
    n = 0
    txp.begin_transaction()
    for _ in range(2000):
        txp.produce(topic, value=rng.randbytes(120), partition=0, on_delivery=_delivery_errors(errors))
        n += 1
    txp.flush(60)
    txp.commit_transaction(60)
    txp.begin_transaction()
    for _ in range(300):
        txp.produce(topic, value=rng.randbytes(120), partition=0, on_delivery=_delivery_errors(errors))
        n += 1
    assert txp.flush(60) == 0  # left open on purpose: the LSO stays at its first offset
    for _ in range(3000):
        plain.produce(topic, value=rng.randbytes(120), partition=0, on_delivery=_delivery_errors(errors))
        n += 1
    assert plain.flush(60) == 0
    return txp, n


def consume(bootstrap: str, topic: str, partition: int, isolation: str, until_offset: int) -> list[Expected]:
    """Every record a real consumer returns from the start of the partition up to ``until_offset``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"expect-{topic}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    out: list[Expected] = []
    tp = TopicPartition(topic, partition)
    try:
        while True:
            msg = consumer.poll(15)
            if msg is not None and not msg.error():
                if msg.offset() > until_offset:
                    break
                out.append(
                    Expected(
                        msg.offset(),
                        msg.timestamp()[1],
                        msg.key(),
                        msg.value(),
                        tuple((k, v) for k, v in (msg.headers() or [])),
                    )
                )
                continue
            if msg is not None and msg.error().code() != -191:  # anything but _PARTITION_EOF
                raise AssertionError(f"consumer error on {topic}-{partition}: {msg.error()}")
            # EOF or a quiet poll: done once the position has passed what is wanted. (Under
            # read_committed the position stops at the LSO, so the wanted range must lie below it.)
            if consumer.position([tp])[0].offset > until_offset:
                break
            assert msg is not None, f"consumer stalled on {topic}-{partition} at {len(out)} records"
    finally:
        consumer.close()
    return out
