"""``continueFromKafka``: one query reads each partition's history from the remote tier and its tail from
the brokers, from exactly the next offset (issue 31, item 3).

Real parts: a transactional topic with aborted transactions on the session's Kafka broker, tiered by the
real CLI to a file:// tier of the test's own (the broker's active segment is never tiered: the tail); a
direct consumer of the broker is what every read must equal, offset for offset."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from storage.dataset import Dataset, consume

from harness.kafka import KafkaCluster
from harness.topics import create_again
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.errors import ConfigError
from storage_core.remote.reader import RemoteReader
from storage_core.spark.admission import Pending, admit
from storage_core.spark.hybrid import KAFKA, LOST, TIER, Piece, pieces
from storage_core.spark.options import parse_options
from storage_core.spark.source import KafkaRangePartition, SplitPartition, _StreamReader

from .conftest import StreamRun, Tier, copy_to


def _produce_transactions(bootstrap: str, topic: str, first: int, count: int) -> None:
    """``count`` records in transactions of 100, every fourth one aborted."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"hybrid-{topic}", "linger.ms": 5}
    )
    producer.init_transactions(60)
    for n, lo in enumerate(range(first, first + count, 100)):
        producer.begin_transaction()
        for i in range(lo, min(lo + 100, first + count)):
            producer.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode() * 20, partition=i % 2)
        # Flush first: an abort sent while the partitions are still being added to the transaction is
        # refused as INVALID_TXN_STATE, a fatal error (librdkafka #4849); CI hit it once. Records still
        # queued after the flush would leave that race open.
        assert producer.flush(60) == 0
        _end_transaction(producer, commit=n % 4 != 3)


def _end_transaction(producer: Producer, commit: bool) -> None:
    """Commit or abort; the expected records are read back from Kafka, so a transaction the broker made
    us abort (a busy machine's timeout) only changes which records count, never the test's verdict."""
    for _ in range(5):
        try:
            (producer.commit_transaction if commit else producer.abort_transaction)(60)
            return
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(60)
                return
            if not error.retriable():
                raise
    raise AssertionError("the transaction did not end after 5 retriable errors")


def _direct(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, int, bytes, bytes]]:
    ends = KafkaAdmin(bootstrap).high_watermarks([(topic, 0), (topic, 1)])
    return sorted(
        (p, e.offset, e.key or b"", e.value or b"")
        for p in (0, 1)
        for e in consume(bootstrap, topic, p, isolation, until_offset=ends[(topic, p)] - 1)
    )


TOPIC_CONFIG = {"internal.segment.bytes": "32768", "retention.ms": "-1"}


def _new_topic(bootstrap: str, prefix: str) -> str:
    """A fresh two-partition topic of 32 KiB segments that Kafka never deletes from."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1, config=TOPIC_CONFIG)])[topic].result(60)
    return topic


def _tiered(data: Dataset, broker: KafkaCluster, topic: str, tmp_path: Path) -> Tier:
    """``topic`` tiered by the real CLI to a file:// tier of the test's own (the active segment stays)."""
    tier = Tier(f"file://{tmp_path / 'tier'}", {}, {}, ["--remote", f"file://{tmp_path / 'tier'}"], {})
    (tmp_path / "tier").mkdir()
    copy_to(tier, data, broker, [topic])
    return tier


def _hybrid_options(tier: Tier, topic: str, bootstrap: str) -> dict[str, str]:
    return {
        "remote": tier.url,
        "topic": topic,
        "continueFromKafka": "true",
        "kafka.bootstrap.servers": bootstrap,
        "kafka.isolation.level": "read_committed",
        "manifestRefreshIntervalMs": "0",
    }


def _rows(df: Any) -> list[tuple[int, int, bytes, bytes]]:
    return sorted(
        (r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]))
        for r in df.select("partition", "offset", "key", "value").collect()
    )


def test_pieces_take_the_tier_where_it_holds_and_the_brokers_elsewhere() -> None:
    assert pieces(0, 100, [(10, 50), (60, 80)], 0, 120) == [
        Piece(KAFKA, 0, 10),
        Piece(TIER, 10, 50),
        Piece(KAFKA, 50, 60),
        Piece(TIER, 60, 80),
        Piece(KAFKA, 80, 100),
    ]
    # The brokers trimmed below 55 and end at 90: what neither holds is lost, never skipped silently.
    assert pieces(0, 100, [(10, 50)], 55, 90) == [
        Piece(LOST, 0, 10),
        Piece(TIER, 10, 50),
        Piece(LOST, 50, 55),
        Piece(KAFKA, 55, 90),
        Piece(LOST, 90, 100),
    ]
    assert pieces(20, 40, [(10, 50)], None, None) == [Piece(TIER, 20, 40)]


def test_a_byte_limit_counts_the_tiers_segments_and_leaves_the_brokers_offsets_to_the_offset_limit() -> None:
    # Partition "a": tiered segments ending at 100 and 200 (1000 bytes each), then the brokers' 200..500.
    # Partition "b": only the brokers' offsets (its tier is behind the start).
    hybrid = {"a": Pending(0, 500, ((100, 1000), (200, 1000))), "b": Pending(50, 350)}
    # Room for one segment of "a": the batch stops at its end; "b" counts no bytes.
    assert admit(hybrid, None, 1500) == {"a": 100, "b": 350}
    # Room for both segments: "a" reads on into the brokers' offsets, to its end.
    assert admit(hybrid, None, 2000) == {"a": 500, "b": 350}
    # The offset limit bounds the brokers' offsets (prorated, as the Kafka source does).
    assert admit(hybrid, 400, 2000) == {"a": 250, "b": 200}
    # Less room than any segment: one segment still moves the stream.
    assert admit({"a": Pending(0, 500, ((100, 1000), (200, 1000)))}, None, 1) == {"a": 100}


def test_a_byte_limited_stream_reads_the_tier_in_bounded_batches_then_the_brokers_every_offset_once(
    spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    bootstrap = spark_dataset.bootstrap
    topic = _new_topic(bootstrap, "hybrid-bytes")
    _produce_transactions(bootstrap, topic, 0, 2000)
    tier = _tiered(spark_dataset, kafka_broker, topic, tmp_path)
    with RemoteReader(tier.store()) as remote:
        manifests = {p: remote.manifest(remote.resolve(topic, p), refresh=True) for p in (0, 1)}
    largest = max(m.size_bytes for manifest in manifests.values() for m in manifest.segments)
    limit = 2 * largest
    options = {**_hybrid_options(tier, topic, bootstrap), "startingOffsets": "earliest"}
    reader = _StreamReader(parse_options({**options, "maxBytesPerTrigger": str(limit)}, streaming=True))

    read: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    tail_batches = 0
    start = None
    for _ in range(100):
        end = reader.latestOffset()
        start = start if start is not None else reader.initialOffset()
        if end == start:
            break
        planned = list(reader.partitions(start, end))
        stored = reads = 0
        for part in planned:
            if isinstance(part, SplitPartition):
                for split in part.splits:
                    read[split.partition].append((split.start_offset, split.end_offset))
                    stored += sum(
                        m.size_bytes
                        for m in manifests[split.partition].segments
                        if m.base_offset < split.end_offset and m.end_offset >= split.start_offset
                    )
                    reads += 1
            else:
                assert isinstance(part, KafkaRangePartition)
                read[part.partition].append((part.start, part.end))
                reads += 1
        tail_batches += any(isinstance(part, KafkaRangePartition) for part in planned)
        assert stored <= limit or reads == 1, "a batch read more of the tier than maxBytesPerTrigger"
        reader.commit(end)
        start = end
    else:
        raise AssertionError("the stream never caught up")
    broker_ends = KafkaAdmin(bootstrap).high_watermarks([(topic, 0), (topic, 1)])
    tiered_bytes = sum(m.size_bytes for manifest in manifests.values() for m in manifest.segments)
    assert tail_batches >= 1, "the brokers' tail was never read"
    for p, windows in read.items():
        windows.sort()
        assert windows[0][0] == 0 and windows[-1][1] == broker_ends[(topic, p)], (p, windows)
        assert all(a[1] == b[0] for a, b in zip(windows, windows[1:], strict=False)), "gap or overlap"
    assert tiered_bytes > 2 * limit, "the tier fits a couple of batches: nothing was bounded"


def test_kafka_options_reach_the_consumer_and_never_show() -> None:
    opts = parse_options(
        {
            "remote": "memory://x",
            "topic": "t",
            "continueFromKafka": "true",
            "kafka.bootstrap.servers": "b:9092",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.password": "s3cret-Hq",
            "kafkaConsumer.pollTimeoutMs": "5000",
        },
        streaming=True,
    )
    assert opts.kafka is not None and opts.kafka.config["sasl.password"] == "s3cret-Hq"
    assert opts.kafka.poll_timeout_ms == 5000 and "s3cret" not in repr(opts)
    for bad, says in (
        ({"kafka.bootstrap.servers": "b:9092"}, "continueFromKafka=true reads"),
        ({"continueFromKafka": "true"}, "kafka.bootstrap.servers"),
        (
            {"continueFromKafka": "true", "kafka.bootstrap.servers": "b", "kafka.auto.offset.reset": "x"},
            "cannot",
        ),
    ):
        with pytest.raises(ConfigError, match=says):
            parse_options({"remote": "memory://x", "topic": "t", **bad}, streaming=True)


@pytest.fixture(scope="module")
def hybrid_topic(spark_dataset: Dataset) -> str:
    topic = _new_topic(spark_dataset.bootstrap, "hybrid")
    _produce_transactions(spark_dataset.bootstrap, topic, 0, 3000)
    return topic


def test_one_stream_reads_the_tier_then_the_brokers_every_offset_once_and_restarts_exactly(
    tk_spark: Any, spark_dataset: Dataset, kafka_broker: KafkaCluster, hybrid_topic: str, tmp_path: Path
) -> None:
    topic, bootstrap = hybrid_topic, spark_dataset.bootstrap
    tier = _tiered(spark_dataset, kafka_broker, topic, tmp_path)
    options = _hybrid_options(tier, topic, bootstrap)
    broker_ends = KafkaAdmin(bootstrap).high_watermarks([(topic, 0), (topic, 1)])
    assert all(tier.remote_end(topic, p) + 1 < broker_ends[(topic, p)] for p in (0, 1)), "no tail to read"

    # Where the split is: the tier's end. Once more is tiered, the same offsets come more from the tier.
    reader = _StreamReader(parse_options({**options, "startingOffsets": "earliest"}, streaming=True))
    start, end = reader.initialOffset(), reader.latestOffset()
    assert start == {topic: {"0": 0, "1": 0}} and end == {
        topic: {str(p): broker_ends[(topic, p)] for p in (0, 1)}
    }
    tails = {
        p.partition: p.start for p in reader.partitions(start, end) if isinstance(p, KafkaRangePartition)
    }
    assert tails == {p: tier.remote_end(topic, p) + 1 for p in (0, 1)}
    assert any(isinstance(p, SplitPartition) for p in reader.partitions(start, end))

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start_stream() -> StreamRun:
        stream = (
            tk_spark.readStream.format("tierkeeper").options(**options).option("startingOffsets", "earliest")
        )
        writer = (
            stream.load()
            .select("partition", "offset", "key", "value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
        )
        return StreamRun(writer.start)

    query = start_stream()
    try:
        query.process_all_available()
    finally:
        query.stop()
    assert _rows(tk_spark.read.parquet(str(out))) == _direct(bootstrap, topic, "read_committed")

    # More records; part of them tiered (the split moves forward); the restarted query resumes exactly.
    _produce_transactions(bootstrap, topic, 3000, 3000)
    copy_to(tier, spark_dataset, kafka_broker, [topic])
    later = {
        p.partition: p.start for p in reader.partitions(start, end) if isinstance(p, KafkaRangePartition)
    }
    assert all(later.get(p, end[topic][str(p)]) > tails[p] for p in (0, 1)), "the split did not move"
    _produce_transactions(bootstrap, topic, 6000, 1000)
    query = start_stream()
    try:
        query.process_all_available()
    finally:
        query.stop()
    written = _rows(tk_spark.read.parquet(str(out)))
    assert len(written) == len(set(written)), "an offset was written twice"
    assert written == _direct(bootstrap, topic, "read_committed")

    # Batch, read_uncommitted: the aborted records too, as a direct read_uncommitted consumer sees them.
    batch = (
        tk_spark.read.format("tierkeeper")
        .options(**options)
        .option("kafka.isolation.level", "read_uncommitted")
    )
    assert _rows(batch.load()) == _direct(bootstrap, topic, "read_uncommitted")


def test_a_topic_created_again_is_read_from_the_brokers_never_joined_to_its_predecessors_tier(
    spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    """The tier holds the deleted incarnation's history under the topic's name; a hybrid read is of the
    brokers' incarnation, whose offsets start again at 0: planned from the brokers alone, never the old
    tier data in front of the new tail. Naming the old incarnation with ``topicId`` is refused."""
    bootstrap = spark_dataset.bootstrap
    topic = _new_topic(bootstrap, "reborn")
    _produce_transactions(bootstrap, topic, 0, 1500)
    tier = _tiered(spark_dataset, kafka_broker, topic, tmp_path)
    old_id = KafkaAdmin(bootstrap).describe([topic])[(topic, 0)].topic_id
    assert tier.remote_end(topic, 0) > 0, "the old incarnation is tiered"

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(60)
    create_again(admin, NewTopic(topic, 2, 1, config=TOPIC_CONFIG))
    _produce_transactions(bootstrap, topic, 0, 300)
    assert KafkaAdmin(bootstrap).describe([topic])[(topic, 0)].topic_id != old_id

    options = {**_hybrid_options(tier, topic, bootstrap), "startingOffsets": "earliest"}
    reader = _StreamReader(parse_options(options, streaming=True))
    start, end = reader.initialOffset(), reader.latestOffset()
    planned = list(reader.partitions(start, end))
    assert planned and all(isinstance(p, KafkaRangePartition) for p in planned), planned
    assert sorted((p.partition, p.start) for p in planned) == [(0, 0), (1, 0)]

    with pytest.raises(ConfigError, match="not the brokers' incarnation"):
        old = _StreamReader(parse_options({**options, "topicId": old_id}, streaming=True))
        old.partitions(old.initialOffset(), old.latestOffset())


BASE_MS = 1_700_000_000_000


def _produce_stamped(bootstrap: str, topic: str, count: int) -> None:
    """Record j to partition j % 2 with the timestamp BASE_MS + 10 * j: offset k of partition p holds
    record 2k + p, so the first offset at a timestamp is known without reading anything back."""
    # Small batches, so the 32 KiB segments roll and most of each partition is tiered. Idempotent: without
    # it a retried batch can land after later ones (seen: a new topic's first batch of partition 0 stored
    # after the rest, no delivery error), and offsets in produce order is what the layout above rests on.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 20, "enable.idempotence": True}
    )
    for j in range(count):
        producer.produce(topic, value=b"v" * 200, partition=j % 2, timestamp=BASE_MS + 10 * j)
    assert producer.flush(60) == 0


def _offset_at(partition: int, timestamp: int) -> int:
    """The first offset of ``partition`` whose timestamp is >= ``timestamp`` (see _produce_stamped)."""
    k = 0
    while BASE_MS + 10 * (2 * k + partition) < timestamp:
        k += 1
    return k


def _stamp(partition: int, offset: int) -> int:
    return BASE_MS + 10 * (2 * offset + partition)


def test_timestamps_start_and_end_a_hybrid_read_in_the_tier_or_on_the_brokers(
    tk_spark: Any, spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    """startingTimestamp / startingOffsetsByTimestamp / endingTimestamp / endingOffsetsByTimestamp with
    continueFromKafka: a timestamp the tier holds a record that late for is looked up in its time
    indexes, a later one on the brokers (offsetsForTimes over the tail), as Spark's Kafka source would
    find them on brokers that kept everything."""
    bootstrap = spark_dataset.bootstrap
    topic = _new_topic(bootstrap, "stamped")
    _produce_stamped(bootstrap, topic, 1200)
    tier = _tiered(spark_dataset, kafka_broker, topic, tmp_path)
    ends = KafkaAdmin(bootstrap).high_watermarks([(topic, 0), (topic, 1)])
    tiered_end = {p: tier.remote_end(topic, p) for p in (0, 1)}
    assert all(20 < tiered_end[p] < ends[(topic, p)] - 20 for p in (0, 1)), "history and a tail"
    options = {**_hybrid_options(tier, topic, bootstrap), "kafka.isolation.level": "read_uncommitted"}

    # Batch: from a record in the tier of partition 0 to one in partition 1's tail.
    start_ts = _stamp(0, tiered_end[0] // 2) - 5  # between two records: the later one starts
    end_ts = _stamp(1, tiered_end[1] + 10)
    batch = (
        tk_spark.read.format("tierkeeper")
        .options(**options)
        .option("startingTimestamp", str(start_ts))
        .option("endingTimestamp", str(end_ts))
        .load()
    )
    got = sorted((r["partition"], r["offset"]) for r in batch.select("partition", "offset").collect())
    want = sorted((p, k) for p in (0, 1) for k in range(_offset_at(p, start_ts), _offset_at(p, end_ts)))
    assert got == want
    assert any(k > tiered_end[p] for p, k in got), "the tail's records are read too"

    # Stream: one partition starts in the tier, the other in the brokers' tail.
    by_partition = {topic: {"0": _stamp(0, 7), "1": _stamp(1, tiered_end[1] + 5)}}
    stream = _StreamReader(
        parse_options({**options, "startingOffsetsByTimestamp": json.dumps(by_partition)}, streaming=True)
    )
    assert stream.initialOffset() == {topic: {"0": 7, "1": tiered_end[1] + 5}}

    # A timestamp later than every record: an error naming the option, or the latest offsets.
    late = str(_stamp(0, ends[(topic, 0)]) + 1_000_000)
    with pytest.raises(ConfigError, match="startingOffsetsByTimestampStrategy=latest"):
        _StreamReader(parse_options({**options, "startingTimestamp": late}, streaming=True)).initialOffset()
    latest = _StreamReader(
        parse_options(
            {**options, "startingTimestamp": late, "startingOffsetsByTimestampStrategy": "latest"},
            streaming=True,
        )
    )
    assert latest.initialOffset() == {topic: {str(p): ends[(topic, p)] for p in (0, 1)}}
