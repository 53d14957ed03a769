"""The tierkeeper stream's semantics equal the Kafka source's (issue 31): ``startingOffsets=latest`` works,
the starting options decide the initial offset only, every planned range is checked for data loss
(checkpointed ones included), the end offset never goes back, manifests are refreshed at most once per
interval, and every filter Spark pushes is either used correctly or left to Spark, never a crash.

Real parts: topics on the session's Kafka broker tiered by the real CLI to a file:// tier of the test's
own; segments taken out of the tier the way operators do it (``scrub --quarantine``'s code path). The
reader-level tests call the stream reader's methods as Spark's Python runner does, in order, so what
each call may see (a restart has no state; a checkpointed start arrives only in ``partitions``) is
exactly what Spark gives it."""

from __future__ import annotations

import json
import logging
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)
from storage.dataset import Dataset

from harness.kafka import KafkaCluster
from storage_core.errors import ConfigError, DataLossError
from storage_core.remote.layout import RemoteLayout, TopicPartitionId
from storage_core.remote.metadata import Manifest
from storage_core.remote.reader import RemoteReader
from storage_core.remote.scrub import Damage
from storage_core.retention.quarantine import quarantine, release
from storage_core.spark.options import parse_options
from storage_core.spark.source import SplitPartition, _StreamReader, pruning_from_filters
from storage_core.spark.windows import topic_partitions

from .conftest import StreamRun, Tier, copy_to
from .test_spark_datasource import _load


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"internal.segment.bytes": "32768", "retention.ms": "-1"}
    for fut in admin.create_topics([NewTopic(topic, partitions, 1, config=config)]).values():
        fut.result(60)


def _produce(bootstrap: str, topic: str, first: int, count: int, partitions: int = 2) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
    for i in range(first, first + count):
        value = f"value-{i}".encode() * 20
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=i % partitions)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def _offsets_to_memory(spark: Any, tier: Tier, topic: str, name: str, **start: str) -> StreamRun:
    """Start a stream of the topic's partitions and offsets from ``start`` into the memory table ``name``."""
    reader = spark.readStream.format("tierkeeper").option("remote", tier.url).option("topic", topic)
    stream = reader.options(**start).option("manifestRefreshIntervalMs", "0").load()
    writer = stream.select("partition", "offset").writeStream.format("memory").queryName(name)
    return StreamRun(writer.start)  # a failed start planned nothing: a fresh start is the same


def _file_tier(path: Path) -> Tier:
    path.mkdir(parents=True, exist_ok=True)
    url = f"file://{path}"
    return Tier(url, {}, {"remote": url}, ["--remote", url], {})


def _manifest(tier: Tier, topic: str, partition: int) -> tuple[TopicPartitionId, Manifest]:
    with RemoteReader(tier.store()) as reader:
        tp = reader.resolve(topic, partition)
        return tp, reader.manifest(tp, refresh=True)


def _quarantine(tier: Tier, topic: str, partition: int, which: slice) -> Manifest:
    """Take the partition's segments ``which`` (in offset order) out of the tier; the new manifest."""
    tp, manifest = _manifest(tier, topic, partition)
    victims = manifest.cover().segments[which]
    assert victims
    damage = [
        Damage(topic, partition, m.base_offset, str(m.segment_id), f"{m.base_offset}.log", "test")
        for m in victims
    ]
    quarantine(tier.store(), tp, damage, now_ms=1)
    return _manifest(tier, topic, partition)[1]


def _reader(tier: Tier, topic: str, **options: str) -> _StreamReader:
    """A stream reader of ``topic`` (or of the subscription in ``options`` when ``topic`` is "")."""
    opts = {
        "remote": tier.url,
        "manifestRefreshIntervalMs": "0",
        **options,
        **({"topic": topic} if topic else {}),
    }
    return _StreamReader(parse_options(opts, streaming=True))


def _offsets_planned(parts: Any) -> dict[int, tuple[int, int]]:
    """Per partition, (first, end) of the planned splits (they are contiguous, in offset order)."""
    out: dict[int, tuple[int, int]] = {}
    for part in parts:
        assert isinstance(part, SplitPartition)
        for s in part.splits:
            lo, hi = out.get(s.partition, (s.start_offset, s.end_offset))
            assert s.start_offset <= hi, "the planned splits leave a gap"
            out[s.partition] = (min(lo, s.start_offset), max(hi, s.end_offset))
    return out


@pytest.fixture(scope="module")
def tiered_topic(spark_dataset: Dataset, kafka_broker: KafkaCluster) -> str:
    """A 2-partition topic of ~30 small segments per partition on the session broker."""
    topic = f"semantics-{uuid.uuid4().hex[:8]}"
    _create(spark_dataset.bootstrap, topic, 2)
    _produce(spark_dataset.bootstrap, topic, 0, 3000)
    return topic


@pytest.fixture
def own_tier(tiered_topic: str, spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path) -> Tier:
    """A file:// tier of the test's own holding ``tiered_topic`` (the test may take segments out)."""
    tier = _file_tier(tmp_path / "tier")
    copy_to(tier, spark_dataset, kafka_broker, [tiered_topic])
    return tier


# ---- 1. startingOffsets=latest ---


def test_stream_from_latest_reads_only_what_is_tiered_after_it_started(
    tk_spark: Any, spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = f"latest-{uuid.uuid4().hex[:8]}"
    _create(spark_dataset.bootstrap, topic, 2)
    _produce(spark_dataset.bootstrap, topic, 0, 2000)
    tier = _file_tier(tmp_path / "tier")
    copy_to(tier, spark_dataset, kafka_broker, [topic])
    ends_before = {p: tier.remote_end(topic, p) for p in range(2)}
    name = f"latest_{uuid.uuid4().hex[:8]}"
    query = _offsets_to_memory(tk_spark, tier, topic, name, startingOffsets="latest")
    try:
        query.process_all_available()
        assert tk_spark.table(name).count() == 0, "startingOffsets=latest read history"
        _produce(spark_dataset.bootstrap, topic, 2000, 2000)
        copy_to(tier, spark_dataset, kafka_broker, [topic])
        query.process_all_available()
    finally:
        query.stop()
    rows = [(r["partition"], r["offset"]) for r in tk_spark.table(name).collect()]
    want = {(p, o) for p in range(2) for o in range(ends_before[p] + 1, tier.remote_end(topic, p) + 1)}
    assert want and len(rows) == len(set(rows)) and set(rows) == want


# ---- 2. every pushed filter is used correctly or left to Spark ---


def test_filters_that_cannot_prune_prune_nothing_and_never_fail() -> None:
    ts = __import__("datetime").datetime(2026, 1, 2)
    nothing = pruning_from_filters(
        [
            Not(EqualTo(("partition",), 3)),
            Not(In(("offset",), (1, 2))),
            IsNull(("key",)),
            IsNotNull(("partition",)),
            StringStartsWith(("topic",), "a"),
            StringEndsWith(("topic",), "a"),
            StringContains(("topic",), "a"),
            EqualTo(("key",), b"k1"),
            EqualTo(("value",), bytearray(b"v")),
            EqualTo(("partition",), "3"),
            EqualTo(("partition",), True),
            In(("partition",), (1, None)),
            EqualTo(("offset",), 1.5),
            LessThan(("timestamp",), ts),
            EqualTo(("headers", "key"), "h"),
        ]
    )
    assert (nothing.partitions, nothing.min_offset, nothing.end_offset, nothing.min_timestamp) == (
        None,
        None,
        None,
        None,
    )
    some = pruning_from_filters([EqualNullSafe(("partition",), 1), GreaterThan(("offset",), 9)])
    assert some.partitions == frozenset({1}) and some.min_offset == 10


WHERE = {
    "partition != 1": lambda p, o, k: p != 1,
    "NOT (offset < 50)": lambda p, o, k: o >= 50,
    "partition = 1 OR offset < 5": lambda p, o, k: p == 1 or o < 5,
    "NOT (partition = 0 AND offset > 10)": lambda p, o, k: not (p == 0 and o > 10),
    "key IS NULL": lambda p, o, k: k is None,
    "key IS NOT NULL AND partition <=> 0": lambda p, o, k: k is not None and p == 0,
    "topic LIKE 'spark%' AND topic LIKE '%codec%' AND topic LIKE '%-codec-%'": lambda p, o, k: True,
    "partition IN (0, 1) AND offset BETWEEN 10 AND 20": lambda p, o, k: 10 <= o <= 20,
    "partition NOT IN (0)": lambda p, o, k: p != 0,
    "timestamp > TIMESTAMP'2000-01-01 00:00:00'": lambda p, o, k: True,
    "offset <=> 7": lambda p, o, k: o == 7,
}


def test_every_filter_spark_pushes_gives_the_rows_spark_would(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier
) -> None:
    topic = spark_dataset.codec_topics[0]
    rows = [
        (r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]))
        for r in _load(tk_spark, file_tier, topic).select("partition", "offset", "key").collect()
    ]
    assert any(k is None for *_, k in rows), "the dataset changed: no null key"
    key = next(k for *_, k in rows if k is not None)
    binary = {f"key = X'{key.hex()}'": lambda p, o, k: k == key}  # a binary comparison
    for where, keep in {**WHERE, **binary}.items():
        got = _load(tk_spark, file_tier, topic).where(where).select("partition", "offset").collect()
        want = sorted((p, o) for p, o, k in rows if keep(p, o, k))
        assert sorted((r["partition"], r["offset"]) for r in got) == want, where


# ---- 3. the starting options decide the initial offset only ---


def test_json_start_below_the_tier_later_does_not_fail_later_triggers(
    own_tier: Tier, tiered_topic: str
) -> None:
    start = json.dumps({tiered_topic: {"0": 0, "1": 0}})
    reader = _reader(own_tier, tiered_topic, startingOffsets=start)
    assert reader.initialOffset() == {tiered_topic: {"0": 0, "1": 0}}
    first_batch_end = reader.latestOffset()
    reader.commit(first_batch_end)
    # Remote retention (here: the first segments taken out) passes the starting offset.
    assert (_quarantine(own_tier, tiered_topic, 0, slice(0, 2)).start_offset or 0) > 0
    assert reader.latestOffset() == first_batch_end


def test_by_timestamp_start_and_a_partition_added_later(
    tk_spark: Any, spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = f"added-{uuid.uuid4().hex[:8]}"
    _create(spark_dataset.bootstrap, topic, 1)
    _produce(spark_dataset.bootstrap, topic, 0, 1500, partitions=1)
    tier = _file_tier(tmp_path / "tier")
    copy_to(tier, spark_dataset, kafka_broker, [topic])
    name = f"added_{uuid.uuid4().hex[:8]}"
    query = _offsets_to_memory(
        tk_spark, tier, topic, name, startingOffsetsByTimestamp=json.dumps({topic: {"0": 0}})
    )
    try:
        query.process_all_available()
        admin = AdminClient({"bootstrap.servers": spark_dataset.bootstrap})
        for fut in admin.create_partitions([NewPartitions(topic, 2)]).values():
            fut.result(60)
        _produce(spark_dataset.bootstrap, topic, 1500, 3000, partitions=2)
        copy_to(tier, spark_dataset, kafka_broker, [topic])
        query.process_all_available()  # the old reader re-applied the timestamps: "partition 1 is missing"
    finally:
        query.stop()
    assert query.query.exception() is None
    rows = [(r["partition"], r["offset"]) for r in tk_spark.table(name).collect()]
    want = {(p, o) for p in range(2) for o in range(tier.remote_end(topic, p) + 1)}
    assert len(rows) == len(set(rows)) and set(rows) == want


# ---- 4. failOnDataLoss for every planned range, checkpointed ones included ---


def test_a_checkpointed_start_below_the_tier_fails_naming_partition_and_offsets(
    own_tier: Tier, tiered_topic: str
) -> None:
    _, before = _manifest(own_tier, tiered_topic, 0)
    after = _quarantine(own_tier, tiered_topic, 0, slice(0, 3))
    assert before.start_offset == 0 and after.start_offset is not None and after.start_offset > 100
    # A restarted query: a new reader, the start from Spark's checkpoint.
    reader = _reader(own_tier, tiered_topic)
    latest = reader.latestOffset()
    with pytest.raises(DataLossError) as err:
        reader.partitions({tiered_topic: {"0": 100, "1": latest[tiered_topic]["1"]}}, latest)
    message = str(err.value)
    assert f"{tiered_topic}-0: offsets 100..{after.start_offset - 1}" in message
    assert "failOnDataLoss=false" in message and "\n" not in message


def test_without_fail_on_data_loss_the_lost_range_is_skipped_with_a_warning(
    own_tier: Tier, tiered_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    after = _quarantine(own_tier, tiered_topic, 0, slice(0, 3))
    assert after.start_offset is not None and after.end_offset is not None
    reader = _reader(own_tier, tiered_topic, failOnDataLoss="false")
    latest = reader.latestOffset()
    with caplog.at_level(logging.WARNING, logger="storage_core.spark.source"):
        planned = _offsets_planned(
            reader.partitions({tiered_topic: {"0": 100, "1": latest[tiered_topic]["1"]}}, latest)
        )
    assert planned == {0: (after.start_offset, after.end_offset + 1)}
    assert f"offsets 100..{after.start_offset - 1} are not in the remote tier" in caplog.text


def test_a_hole_inside_a_planned_range_is_data_loss(own_tier: Tier, tiered_topic: str) -> None:
    _, before = _manifest(own_tier, tiered_topic, 0)
    middle = before.cover().segments[5]
    _quarantine(own_tier, tiered_topic, 0, slice(5, 6))
    reader = _reader(own_tier, tiered_topic)
    latest = reader.latestOffset()
    with pytest.raises(DataLossError, match=f"offsets {middle.base_offset}\\.\\."):
        reader.partitions({tiered_topic: {"0": 0, "1": latest[tiered_topic]["1"]}}, latest)
    # Ranges that do not reach the hole are read as usual (here in a checkpoint of the single-topic
    # reader of before, whose offsets named no topic: they are the one topic's).
    assert _offsets_planned(reader.partitions({"0": 0}, {"0": middle.base_offset})) == {
        0: (0, middle.base_offset)
    }


# ---- 5. the end offset never moves backwards ---


def test_quarantining_the_last_segment_does_not_move_the_end_back(own_tier: Tier, tiered_topic: str) -> None:
    reader = _reader(own_tier, tiered_topic, startingOffsets="earliest")
    reader.initialOffset()
    end = reader.latestOffset()
    reader.commit(end)
    lowered = _quarantine(own_tier, tiered_topic, 0, slice(-1, None))
    assert lowered.end_offset is not None and lowered.end_offset + 1 < end[tiered_topic]["0"]
    assert reader.latestOffset() == end, "Spark would commit the lower offset and read it again"
    # A restart while the tier's end is lower: Spark's first batch goes from the checkpoint down to the
    # lower end and reads nothing; once the segment is back, the next batch (from that lower end, as Spark
    # asks) must not read [lower end, checkpoint) a second time.
    restarted = _reader(own_tier, tiered_topic)
    lower = restarted.latestOffset()
    assert lower[tiered_topic]["0"] == lowered.end_offset + 1
    assert _offsets_planned(restarted.partitions(end, lower)) == {}
    tp, _ = _manifest(own_tier, tiered_topic, 0)
    (victim,) = _quarantined(own_tier, tp)
    release(own_tier.store(), tp, victim)
    assert restarted.latestOffset() == end
    assert _offsets_planned(restarted.partitions(lower, end)) == {}, "read twice"


def _quarantined(tier: Tier, tp: TopicPartitionId) -> list[str]:
    from storage_core.remote.catalog import PartitionCatalog
    from storage_core.remote.layout import SegmentState

    listing = PartitionCatalog(tier.store(), RemoteLayout(tier.store().root), tp).listing()
    return [str(e.segment_id) for e in listing.segments.values() if e.state is SegmentState.QUARANTINED]


# ---- 6. manifests refreshed at most once per interval ---


def test_idle_triggers_reuse_the_manifests_until_the_interval_passes(
    own_tier: Tier, tiered_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    manifest = RemoteReader.manifest

    def counting(self: RemoteReader, tp: TopicPartitionId, *, refresh: bool = False) -> Manifest:
        reads.append(tp.partition)
        return manifest(self, tp, refresh=refresh)

    monkeypatch.setattr(RemoteReader, "manifest", counting)
    now = [1000.0]
    opts = parse_options(
        {"remote": own_tier.url, "topic": tiered_topic, "manifestRefreshIntervalMs": "60000"}, streaming=True
    )
    reader = _StreamReader(opts, clock=lambda: now[0])
    reader.initialOffset()
    latest = reader.latestOffset()
    for _ in range(100):
        now[0] += 0.01  # Spark's idle polling
        assert reader.latestOffset() == latest
    assert len(reads) == 2, "an idle trigger read manifests"
    now[0] += 60
    reader.latestOffset()
    assert len(reads) == 4
    assert parse_options({"remote": "memory://x", "topic": "t"}, streaming=True).refresh_interval_ms == 10_000


# ---- 7. the incarnation hint names the option ---


def test_several_incarnations_hint_names_the_topic_id_option(tmp_path: Path) -> None:
    tier = _file_tier(tmp_path / "tier")
    layout = RemoteLayout(tier.store().root)
    for topic_id in ("AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"):
        Path(layout.partition_dir(TopicPartitionId("orders", topic_id, 0)).removeprefix("file://")).mkdir(
            parents=True
        )
    with RemoteReader(tier.store()) as reader, pytest.raises(ConfigError) as err:
        topic_partitions(reader, parse_options({"remote": tier.url, "topic": "orders"}))
    assert "option topicId" in str(err.value) and "--topic-id" not in str(err.value)


# ---- 8. rate limits: maxOffsetsPerTrigger, maxBytesPerTrigger ---


def _drain(reader: _StreamReader) -> list[dict[int, tuple[int, int]]]:
    """Run triggers as Spark does (latest first, then the initial offset; each batch from the previous
    end) until nothing is new: each batch's planned offsets."""
    batches: list[dict[int, tuple[int, int]]] = []
    start = None
    for _ in range(200):
        end = reader.latestOffset()
        if start is None:
            start = reader.initialOffset()
        if end == start:
            return batches
        batches.append(_offsets_planned(reader.partitions(start, end)))
        reader.commit(end)
        start = end
    raise AssertionError("the stream never caught up")


def test_max_offsets_per_trigger_bounds_every_batch_and_reads_every_offset_once(
    own_tier: Tier, tiered_topic: str
) -> None:
    reader = _reader(own_tier, tiered_topic, startingOffsets="earliest", maxOffsetsPerTrigger="500")
    batches = _drain(reader)
    assert len(batches) >= 6, "3000 offsets in batches of about 500"
    read: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    for batch in batches:
        assert sum(hi - lo for lo, hi in batch.values()) <= 500 + 2
        for p, window in batch.items():
            read[p].append(window)
    for p, windows in read.items():
        assert windows[0][0] == 0 and windows[-1][1] == own_tier.remote_end(tiered_topic, p) + 1
        assert all(a[1] == b[0] for a, b in zip(windows, windows[1:], strict=False)), "gap or overlap"


def test_max_bytes_per_trigger_takes_whole_segments_within_the_limit(
    own_tier: Tier, tiered_topic: str
) -> None:
    sizes = {p: [m.size_bytes for m in _manifest(own_tier, tiered_topic, p)[1].segments] for p in (0, 1)}
    limit = 3 * max(max(s) for s in sizes.values())
    reader = _reader(own_tier, tiered_topic, startingOffsets="earliest", maxBytesPerTrigger=str(limit))
    batches = _drain(reader)
    total = sum(sum(s) for s in sizes.values())
    assert len(batches) >= total // limit
    manifests = {p: _manifest(own_tier, tiered_topic, p)[1] for p in (0, 1)}
    for batch in batches:
        stored = sum(
            m.size_bytes
            for p, (lo, hi) in batch.items()
            for m in manifests[p].segments
            if m.end_offset >= lo and m.base_offset < hi
        )
        assert stored <= limit, "a batch read more stored bytes than maxBytesPerTrigger"
    # A limit below one segment still moves: one segment per batch.
    tiny = _reader(own_tier, tiered_topic, startingOffsets="earliest", maxBytesPerTrigger="1")
    first = tiny.partitions(tiny.initialOffset(), tiny.latestOffset())
    assert len(first) == 1


def test_a_batch_reads_each_partition_in_as_few_tasks_as_max_bytes_per_split_allows(
    own_tier: Tier, tiered_topic: str
) -> None:
    """A micro-batch of many segments is one task per partition (the Kafka source's shape: a Python
    source's task costs more than reading a segment), cut where ``maxBytesPerSplit`` says; the tasks'
    splits still cover every offset once, in order."""
    ends = {p: own_tier.remote_end(tiered_topic, p) + 1 for p in (0, 1)}
    reader = _reader(own_tier, tiered_topic, startingOffsets="earliest")
    tasks = list(reader.partitions(reader.initialOffset(), reader.latestOffset()))
    assert sorted(t.splits[0].partition for t in tasks) == [0, 1]
    assert all(len(t.splits) > 5 for t in tasks), "the ~30 segments of each partition in one task"
    assert _offsets_planned(tasks) == {p: (0, end) for p, end in ends.items()}
    sizes = [m.size_bytes for m in _manifest(own_tier, tiered_topic, 0)[1].segments]
    limit = 3 * max(sizes)
    bounded = _reader(own_tier, tiered_topic, startingOffsets="earliest", maxBytesPerSplit=str(limit))
    tasks = list(bounded.partitions(bounded.initialOffset(), bounded.latestOffset()))
    assert len(tasks) >= 2 * (sum(sizes) // limit), "maxBytesPerSplit cut the partitions into tasks"
    assert all(1 <= len(t.splits) <= 3 for t in tasks)
    assert _offsets_planned(tasks) == {p: (0, end) for p, end in ends.items()}
    for task in tasks:  # each task's splits follow each other in offset order
        pairs = zip(task.splits, task.splits[1:], strict=False)
        assert all(a.partition == b.partition and a.end_offset <= b.start_offset for a, b in pairs)


# ---- 9. Kafka's subscriptions and offsets JSON ---


def test_pattern_picks_up_a_new_topic_and_assign_reads_only_its_partitions(
    own_tier: Tier, tiered_topic: str, spark_dataset: Dataset, kafka_broker: KafkaCluster
) -> None:
    pattern = re.escape(tiered_topic) + "(-new)?"
    reader = _reader(own_tier, "", subscribePattern=pattern, startingOffsets="earliest")
    start = reader.initialOffset()
    assert set(start) == {tiered_topic}, "offsets are Kafka's JSON, keyed by topic"
    end = reader.latestOffset()
    assert end == {tiered_topic: {str(p): own_tier.remote_end(tiered_topic, p) + 1 for p in (0, 1)}}
    reader.commit(end)
    new = f"{tiered_topic}-new"
    _create(spark_dataset.bootstrap, new, 1)
    _produce(spark_dataset.bootstrap, new, 0, 1000, partitions=1)
    copy_to(own_tier, spark_dataset, kafka_broker, [new])
    later = reader.latestOffset()
    assert later[new] == {"0": own_tier.remote_end(new, 0) + 1} and later[tiered_topic] == end[tiered_topic]
    assert _offsets_planned(reader.partitions(end, later)) == {0: (0, own_tier.remote_end(new, 0) + 1)}

    assigned = _reader(
        own_tier, "", assign=json.dumps({tiered_topic: [1], new: [0]}), startingOffsets="earliest"
    )
    assert {t: set(ps) for t, ps in assigned.latestOffset().items()} == {tiered_topic: {"1"}, new: {"0"}}
