"""One 3-broker Kafka cluster for the gateway tests, with topics produced, read directly, tiered and
trimmed by Tierkeeper's own commands, and a gateway in front of it (started once per session: every test
reads through the same gateway, as many clients of one deployment would).

The topics, all tiered and trimmed in one pass of the commands:
- ``history``: plain records with explicit timestamps (the consumers, timestamps and seeks);
- ``codecs``: one partition per compression codec, each written by a producer of that codec;
- ``transactions``: committed and aborted transactions of two transactional producers, interleaved, some
  spanning a segment roll, read directly read_committed and read_uncommitted before the trim;
- ``peak``: one partition whose largest timestamp is carried by two early records, both tiered and
  trimmed (ListOffsets max-timestamp).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway import GatewayProcess, tier_and_trim
from harness.kafka import KafkaCluster

PARTITIONS = 3
RECORDS = 3000
SEGMENT_BYTES = 65536

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_RECORDS = 800
"""Per codec partition: about two segments' worth once compressed (the values are half random)."""
TXN_PARTITIONS = 2
TXN_LAST = 200
"""Records of the last (aborted) transaction of the transactions topic."""
PEAK_RECORDS = 1200
PEAK_OFFSETS = (5, 7)
"""The records of ``peak`` stamped with its largest timestamp; the rest rise one millisecond apart."""
PEAK_AFTER_MS = 100_000

Record = tuple[int, int, bytes | None, bytes | None]
"""(partition, offset, key, value)."""
DetailedRecord = tuple[int, int, bytes | None, bytes | None, int, tuple[tuple[str, bytes], ...]]
"""(partition, offset, key, value, timestamp, headers)."""


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
    history_detail: list[DetailedRecord] = field(default_factory=list)
    """``expected`` with the records' timestamps (explicit, one millisecond apart) and headers."""
    codecs_topic: str = "codecs"
    codecs_expected: list[DetailedRecord] = field(default_factory=list)
    """Partition i of ``codecs_topic`` was written with compression CODECS[i]."""
    txn_topic: str = "transactions"
    txn_committed: list[Record] = field(default_factory=list)
    """A direct read_committed read of ``txn_topic`` before the trim."""
    txn_uncommitted: list[Record] = field(default_factory=list)
    """A direct read_uncommitted read of ``txn_topic`` before the trim."""
    peak_topic: str = "peak"
    peak_timestamp: int = -1
    """The largest timestamp of ``peak_topic``, carried by its records at PEAK_OFFSETS."""
    all_log_starts: dict[tuple[str, int], int] = field(default_factory=dict)
    """Every topic's partitions' log starts after the trim."""


def create_topic(cluster: KafkaCluster, name: str, partitions: int = PARTITIONS, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config})
    settings = {"internal.segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1", **config}
    admin.create_topics([NewTopic(name, partitions, 3, config=settings)])[name].result(60)
    cluster.wait_topic(name, partitions)


def produce(
    cluster: KafkaCluster,
    topic: str,
    count: int,
    partitions: int = PARTITIONS,
    base_timestamp: int | None = None,
    **config: str,
) -> None:
    """Record i goes to partition i % partitions; with ``base_timestamp`` its timestamp is that + i ms."""
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
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}-{'x' * (i % 300)}".encode(),
            partition=i % partitions,
            **({} if base_timestamp is None else {"timestamp": base_timestamp + i}),
        )
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def produce_peak(cluster: KafkaCluster, topic: str, base_timestamp: int) -> int:
    """PEAK_RECORDS records one millisecond apart from ``base_timestamp``, but those at PEAK_OFFSETS carry
    the topic's largest timestamp (returned). Idempotent: the offsets are the produce order."""
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True, "batch.size": 16384}
    )
    errors: list[Any] = []
    peak = base_timestamp + PEAK_AFTER_MS
    for i in range(PEAK_RECORDS):
        stamp = peak if i in PEAK_OFFSETS else base_timestamp + i
        producer.produce(
            topic,
            value=f"p{i}-".encode() + b"x" * 200,
            partition=0,
            timestamp=stamp,
            on_delivery=lambda err, _msg: err is not None and errors.append(err),
        )
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:3]
    return peak


def produce_codecs(cluster: KafkaCluster, topic: str, base_timestamp: int) -> None:
    """Partition i gets CODEC_RECORDS records from a producer compressing with CODECS[i]; values are half
    random (so the codecs have work to do and the partition still spans segments), with headers."""
    for partition, codec in enumerate(CODECS):
        rng = random.Random(partition)
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "linger.ms": 5,
                "batch.size": 16384,
                "acks": "all",
                "compression.type": codec,
            }
        )
        for i in range(CODEC_RECORDS):
            producer.produce(
                topic,
                key=f"{codec}-{i}".encode(),
                value=rng.randbytes(150) + b"z" * (i % 200),
                partition=partition,
                timestamp=base_timestamp + i,
                headers=[("codec", codec.encode()), ("i", str(i).encode())],
            )
            if i % 200 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0


def produce_transactions(cluster: KafkaCluster, topic: str) -> tuple[int, int]:
    """Committed and aborted transactions of two transactional producers on TXN_PARTITIONS partitions:
    some span a segment roll (80 KB per partition, segments of 64 KB), one aborted transaction stays open
    while the other producer commits one, and the last one, aborted, spans the tier's end (TXN_LAST of
    them). Returns (records committed, records written)."""
    rng = random.Random(7)
    sent = [0]

    def producer(name: str) -> Producer:
        p = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "transactional.id": f"{topic}-{name}",
                "linger.ms": 5,
                "batch.size": 16384,
                "acks": "all",
            }
        )
        p.init_transactions(60)
        return p

    def send(p: Producer, count: int) -> None:
        for _ in range(count):
            i = sent[0]
            sent[0] += 1
            p.produce(topic, key=f"t{i}".encode(), value=rng.randbytes(1000), partition=i % TXN_PARTITIONS)
        assert p.flush(60) == 0  # all delivered: an abort then races nothing and drops nothing

    a, b = producer("a"), producer("b")
    committed = 0
    for count, commit in ((40, True), (40, False), (160, True)):
        a.begin_transaction()
        send(a, count)
        (a.commit_transaction if commit else a.abort_transaction)(60)
        committed += count if commit else 0
    b.begin_transaction()
    send(b, 30)
    a.begin_transaction()
    send(a, 30)
    a.commit_transaction(60)
    committed += 30
    send(b, 160)  # b's transaction, open across a's commit and across a segment roll, is aborted
    b.abort_transaction(60)
    # Last, an aborted transaction of 100 KB per partition: it spans a roll and its last batches and abort
    # marker stay in the active segment, so the tier ends inside it and the brokers know its end.
    for count, commit in ((160, False), (40, True), (60, True), (200, False)):
        a.begin_transaction()
        send(a, count)
        (a.commit_transaction if commit else a.abort_transaction)(60)
        committed += count if commit else 0
    return committed, sent[0]


def read_all(
    bootstrap: str, topic: str, partitions: int = PARTITIONS, *, detail: bool = False, **config: str
) -> list[Any]:
    """Every record of every partition from its earliest offset to its current end, by assignment:
    Record tuples, or DetailedRecord ones with ``detail``."""
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
        out: list[Any] = []
        done: set[int] = {p for p, end in ends.items() if end == 0}
        while len(done) < partitions:
            msg = consumer.poll(30)
            assert msg is not None, f"no record or end of partition within 30 s (done: {sorted(done)})"
            if msg.error():
                assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                if msg.offset() >= ends[msg.partition()] or ends[msg.partition()] == 0:
                    done.add(msg.partition())
                continue
            record: Any = (msg.partition(), msg.offset(), msg.key(), msg.value())
            if detail:
                record += (msg.timestamp()[1], tuple(msg.headers() or ()))
            out.append(record)
        return sorted(out)
    finally:
        consumer.close()


def read_group(bootstrap: str, topic: str, group: str, **config: str) -> list[Record]:
    """Every record of a topic read by a consumer group subscribed from earliest, committed at the end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            **config,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: list[Record] = []
    try:
        consumer.subscribe([topic])
        while len(got) < RECORDS:
            msg = consumer.poll(30)
            assert msg is not None, f"stalled after {len(got)} records"
            assert not msg.error(), msg.error()
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


@pytest.fixture(scope="session")
def gateway_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    # Segments wholly below a trimmed log start leave the brokers' logs at the next retention check (5
    # minutes by default); checked every second, the tests see the trimmed state soon after the trim.
    cluster = KafkaCluster(
        tmp_path_factory.mktemp("kafka-gateway"),
        brokers=3,
        broker_config={"log.retention.check.interval.ms": "1000"},
    )
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def tiered(gateway_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    work: Path = tmp_path_factory.mktemp("gateway")
    remote = f"file://{work / 'tier'}"
    topic, codecs_topic, txn_topic, peak_topic = "history", "codecs", "transactions", "peak"
    # An hour ago, one millisecond per record: within retention, older than anything the brokers stamp.
    base_ts = (int(time.time()) - 3600) * 1000
    create_topic(gateway_cluster, topic)
    create_topic(gateway_cluster, codecs_topic, len(CODECS))
    create_topic(gateway_cluster, txn_topic, TXN_PARTITIONS)
    create_topic(gateway_cluster, peak_topic, 1)
    produce(gateway_cluster, topic, RECORDS, base_timestamp=base_ts)
    produce_codecs(gateway_cluster, codecs_topic, base_ts)
    committed, written = produce_transactions(gateway_cluster, txn_topic)
    peak_timestamp = produce_peak(gateway_cluster, peak_topic, base_ts)
    direct = gateway_cluster.bootstrap_servers
    history_detail = read_all(direct, topic, detail=True)
    expected = [r[:4] for r in history_detail]
    assert len(expected) == RECORDS
    codecs_expected = read_all(direct, codecs_topic, len(CODECS), detail=True)
    assert len(codecs_expected) == CODEC_RECORDS * len(CODECS)
    txn_committed = read_all(direct, txn_topic, TXN_PARTITIONS, **{"isolation.level": "read_committed"})
    txn_uncommitted = read_all(direct, txn_topic, TXN_PARTITIONS, **{"isolation.level": "read_uncommitted"})
    assert (len(txn_committed), len(txn_uncommitted)) == (committed, written)
    tier_and_trim(gateway_cluster, ["--remote", remote], [topic, codecs_topic, txn_topic, peak_topic])
    consumer = Consumer({"bootstrap.servers": gateway_cluster.bootstrap_servers, "group.id": "probe"})
    all_log_starts = {
        (name, p): consumer.get_watermark_offsets(TopicPartition(name, p), timeout=30)[0]
        for name, count in (
            (topic, PARTITIONS),
            (codecs_topic, len(CODECS)),
            (txn_topic, TXN_PARTITIONS),
            (peak_topic, 1),
        )
        for p in range(count)
    }
    consumer.close()
    assert all(start > 0 for start in all_log_starts.values()), (
        f"the trim left history on the brokers: {all_log_starts}"
    )
    log_starts = {p: start for (name, p), start in all_log_starts.items() if name == topic}
    gateway = GatewayProcess(gateway_cluster.bootstrap_servers, remote, work / "gateway").start()
    try:
        yield Tiered(
            gateway_cluster,
            gateway,
            remote,
            topic,
            expected,
            log_starts,
            history_detail=history_detail,
            codecs_topic=codecs_topic,
            codecs_expected=codecs_expected,
            txn_topic=txn_topic,
            txn_committed=txn_committed,
            txn_uncommitted=txn_uncommitted,
            all_log_starts=all_log_starts,
            peak_topic=peak_topic,
            peak_timestamp=peak_timestamp,
        )
    finally:
        gateway.stop()
