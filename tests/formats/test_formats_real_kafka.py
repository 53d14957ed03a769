"""Our readers against a real Kafka 4 broker's log dir: every batch, record, index entry, transaction
index entry and producer snapshot agrees with Kafka's own DumpLogSegments, every record agrees with a
real consumer, and the checkpoint files agree with the cluster's metadata."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicCollection
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster
from storage_core.errors import CorruptDataError
from storage_core.formats.batch_stream import BatchStreamValidator
from storage_core.formats.checkpoints import (
    EpochEntry,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
)
from storage_core.formats.indexes import OffsetIndex, TimeIndex, iter_txn_index
from storage_core.formats.producer_snapshot import parse_producer_snapshot
from storage_core.formats.record_batch import (
    RawBatch,
    TimestampType,
    TruncatedTailError,
    iter_batch_headers,
    iter_batches,
)
from storage_core.formats.records import ControlType, Record, decode_records
from storage_core.formats.remote_index import (
    RemotePointerIndex,
    build_remote_indexes,
    position_for_offset,
    read_remote_log_entry,
)
from storage_core.formats.segment_files import SegmentFileKind, TopicPartition, parse_segment_file_name
from storage_core.formats.source import bytes_fetcher

pytestmark = pytest.mark.kafka

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
SEGMENT_BYTES = "65536"
TOPIC_CONFIG = {"internal.segment.bytes": SEGMENT_BYTES, "retention.ms": "-1"}
PER_CODEC = 2000


@dataclass
class Produced:
    cluster: KafkaCluster
    topics: list[str]
    dump: dict[str, str]
    """DumpLogSegments output per file path."""

    def partition_dir(self, topic: str) -> Path:
        return self.cluster.log_dir(1) / f"{topic}-0"

    def files(self, topic: str, kind: SegmentFileKind) -> list[Path]:
        found = []
        for path in self.partition_dir(topic).iterdir():
            parsed = parse_segment_file_name(path.name)
            if parsed is not None and parsed.kind is kind:
                found.append(path)
        return sorted(found)

    def batches(self, topic: str) -> list[RawBatch]:
        out: list[RawBatch] = []
        for path in self.files(topic, SegmentFileKind.LOG):
            with open(path, "rb") as f:
                out.extend(iter_batches(f, path=str(path)))
        return out


def _value(i: int) -> bytes:
    # Half random so every codec still needs several 64 KiB segments; half text so it compresses.
    return os.urandom(60) + f"|record {i} of the format test|".encode() * 3


def _produce_codec_topics(bootstrap: str, topics: dict[str, str]) -> None:
    # Recent, deliberately non-monotonic CreateTimes (old ones would invite time-based retention).
    now_ms = int(time.time() * 1000)
    for topic, codec in topics.items():
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "compression.type": codec,
                "linger.ms": 5,
                "batch.size": 16384,
                "enable.idempotence": True,
            }
        )
        for i in range(PER_CODEC):
            key = None if i % 10 == 0 else f"key-{i % 97}".encode()
            value = None if i % 50 == 7 else _value(i)
            headers = None
            if i % 4 == 1:
                headers = [("trace", f"t-{i}".encode()), ("null-header", None), ("empty", b"")]
            producer.produce(topic, key=key, value=value, headers=headers, timestamp=now_ms - i * 7 % 5000)
            if i % 500 == 499:
                producer.flush(30)
        assert producer.flush(30) == 0


def _produce_transactions(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fmt-test-txn", "linger.ms": 5})
    producer.init_transactions(60)
    for txn in range(8):
        producer.begin_transaction()
        for i in range(150):
            producer.produce(topic, key=f"txn-{txn}".encode(), value=_value(txn * 1000 + i))
        # Flush first: librdkafka drops unsent records on abort, and an abort must reach the log.
        assert producer.flush(30) == 0
        if txn % 2:
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)


def _split_dump(output: str) -> dict[str, str]:
    sections: dict[str, str] = {}
    for chunk in re.split(r"^Dumping ", output, flags=re.MULTILINE):
        if chunk.strip():
            path, _, body = chunk.partition("\n")
            sections[path.strip()] = body
    return sections


@pytest.fixture(scope="module")
def produced(kafka_broker: KafkaCluster) -> Produced:
    bootstrap = kafka_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    codec_topics = {f"fmt-{codec}": codec for codec in CODECS}
    new_topics = [NewTopic(t, 1, 1, config=TOPIC_CONFIG) for t in codec_topics]
    log_append = {**TOPIC_CONFIG, "message.timestamp.type": "LogAppendTime"}
    new_topics.append(NewTopic("fmt-logappend", 1, 1, config=log_append))
    new_topics.append(NewTopic("fmt-txn", 1, 1, config=TOPIC_CONFIG))
    for future in admin.create_topics(new_topics).values():
        future.result(30)
    _produce_codec_topics(bootstrap, codec_topics)
    _produce_codec_topics(bootstrap, {"fmt-logappend": "lz4"})
    _produce_transactions(bootstrap, "fmt-txn")
    topics = [*codec_topics, "fmt-logappend", "fmt-txn"]

    # The high-watermark checkpoint is written every 5 s; wait until it covers our topics.
    checkpoint = kafka_broker.log_dir(1) / "replication-offset-checkpoint"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        written = read_offset_checkpoint(checkpoint) if checkpoint.exists() else {}
        if all(written.get(TopicPartition(t, 0), 0) > 0 for t in topics) and written.get(
            TopicPartition("fmt-txn", 0), 0
        ) >= _log_end(kafka_broker, "fmt-txn"):
            break
        time.sleep(0.5)

    result = Produced(kafka_broker, topics, {})
    files = [f for topic in topics for kind in SegmentFileKind for f in result.files(topic, kind)]
    result.dump = _split_dump(kafka_broker.dump_log_segments(files, deep=True))
    return result


def _log_end(cluster: KafkaCluster, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "fmt-watermarks"})
    try:
        return int(consumer.get_watermark_offsets(KafkaTopicPartition(topic, 0), timeout=30)[1])
    finally:
        consumer.close()


_FIELD = re.compile(r"(\w+): (\S+)")


def _fields(line: str) -> dict[str, str]:
    return dict(_FIELD.findall(line))


def _dumped_log(produced: Produced, topic: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    batches, records = [], []
    for path in produced.files(topic, SegmentFileKind.LOG):
        for line in produced.dump[str(path)].splitlines():
            if line.startswith("baseOffset:"):
                batches.append(_fields(line))
            elif line.startswith("| offset:"):
                records.append(_fields(line))
    return batches, records


def _timestamp_label(kind: TimestampType) -> str:
    return "CreateTime" if kind is TimestampType.CREATE_TIME else "LogAppendTime"


def test_every_topic_rolled_several_segments(produced: Produced) -> None:
    for topic in produced.topics:
        assert len(produced.files(topic, SegmentFileKind.LOG)) >= 3, topic


def test_batches_agree_with_dump_log_segments(produced: Produced) -> None:
    for topic in produced.topics:
        dumped, _ = _dumped_log(produced, topic)
        ours = produced.batches(topic)
        assert len(ours) == len(dumped) > 0, topic
        for batch, theirs in zip(ours, dumped, strict=True):
            h = batch.header
            label = _timestamp_label(h.timestamp_type)
            assert theirs["baseOffset"] == str(h.base_offset)
            assert theirs["lastOffset"] == str(h.last_offset)
            assert theirs["count"] == str(h.records_count)
            assert theirs["position"] == str(batch.position)
            assert theirs["size"] == str(h.size_in_bytes)
            assert theirs[label] == str(h.max_timestamp)
            assert theirs["compresscodec"] == h.codec.name.lower()
            assert theirs["crc"] == str(h.crc) and theirs["isvalid"] == "true"
            assert theirs["producerId"] == str(h.producer_id)
            assert theirs["partitionLeaderEpoch"] == str(h.partition_leader_epoch)
            assert theirs["isTransactional"] == str(h.is_transactional).lower()
            assert theirs["isControl"] == str(h.is_control).lower()
    codecs_seen = {b.header.codec.name.lower() for t in produced.topics for b in produced.batches(t)}
    assert codecs_seen == set(CODECS)


def test_records_agree_with_dump_log_segments(produced: Produced) -> None:
    for topic in produced.topics:
        _, dumped = _dumped_log(produced, topic)
        ours = [r for b in produced.batches(topic) for r in decode_records(b, verify_crc=False)]
        assert len(ours) == len(dumped), topic
        for record, theirs in zip(ours, dumped, strict=True):
            assert theirs["offset"] == str(record.offset)
            assert theirs[_timestamp_label(record.timestamp_type)] == str(record.timestamp)
            assert theirs["keySize"] == str(-1 if record.key is None else len(record.key))
            assert theirs["valueSize"] == str(-1 if record.value is None else len(record.value))
            if record.is_control:
                assert record.control_type is not None
                assert theirs["endTxnMarker"] == ControlType(record.control_type).name


def _consume(bootstrap: str, topic: str, isolation: str, until_offset: int) -> Iterator[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"fmt-{topic}-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([KafkaTopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            yield msg
            if msg.offset() >= until_offset:
                return
        raise AssertionError(f"consumer of {topic} did not reach offset {until_offset}")
    finally:
        consumer.close()


def _as_consumer_sees(record: Record) -> tuple[object, ...]:
    kind = 1 if record.timestamp_type is TimestampType.CREATE_TIME else 2
    return (
        record.offset,
        record.key,
        record.value,
        list(record.headers) or None,
        (kind, record.timestamp),
        record.leader_epoch,
    )


def test_records_agree_with_a_real_consumer(produced: Produced) -> None:
    for topic in produced.topics:
        ours = [r for b in produced.batches(topic) for r in decode_records(b) if not r.is_control]
        got = [
            (m.offset(), m.key(), m.value(), m.headers(), m.timestamp(), m.leader_epoch())
            for m in _consume(produced.cluster.bootstrap_servers, topic, "read_uncommitted", ours[-1].offset)
        ]
        assert got == [_as_consumer_sees(r) for r in ours], topic
        if topic == "fmt-logappend":
            assert {r.timestamp_type for r in ours} == {TimestampType.LOG_APPEND_TIME}
        if topic not in ("fmt-logappend", "fmt-txn"):
            assert any(r.key is None for r in ours) and any(r.value is None for r in ours)
            assert any(("null-header", None) in r.headers for r in ours)


def test_transaction_index_explains_what_read_committed_hides(produced: Produced) -> None:
    records = [r for b in produced.batches("fmt-txn") for r in decode_records(b)]
    markers = [r for r in records if r.is_control]
    assert [m.control_type for m in markers] == [ControlType.COMMIT, ControlType.ABORT] * 4
    aborted = []
    for path in produced.files("fmt-txn", SegmentFileKind.TXN_INDEX):
        with open(path, "rb") as f:
            aborted.extend(iter_txn_index(f, path=str(path)))
    assert len(aborted) == 4
    dumped = [
        _fields(line)
        for path in produced.files("fmt-txn", SegmentFileKind.TXN_INDEX)
        for line in produced.dump[str(path)].splitlines()
        if "producerId" in line
    ]
    assert [(d["producerId"], d["firstOffset"], d["lastOffset"], d["lastStableOffset"]) for d in dumped] == [
        (str(t.producer_id), str(t.first_offset), str(t.last_offset), str(t.last_stable_offset))
        for t in aborted
    ]

    def is_aborted(r: Record) -> bool:
        return any(
            t.producer_id == r.producer_id and t.first_offset <= r.offset <= t.last_offset for t in aborted
        )

    committed = [r.offset for r in records if not r.is_control and not is_aborted(r)]
    consumed = _consume(produced.cluster.bootstrap_servers, "fmt-txn", "read_committed", committed[-1])
    got = [m.offset() for m in consumed]
    assert got == committed
    assert len(committed) == 4 * 150


def _base_offset(path: Path) -> int:
    parsed = parse_segment_file_name(path.name)
    assert parsed is not None
    return parsed.base_offset


def _dumped_index(produced: Produced, path: Path) -> list[dict[str, str]]:
    return [_fields(line) for line in produced.dump[str(path)].splitlines() if line.strip()]


def test_indexes_agree_with_dump_log_segments(produced: Produced) -> None:
    for topic in produced.topics:
        logs = produced.files(topic, SegmentFileKind.LOG)
        batches = produced.batches(topic)
        by_position = {(b.position, b.header.base_offset) for b in batches}
        for path in produced.files(topic, SegmentFileKind.INDEX):
            base = _base_offset(path)
            with open(path, "rb") as f:
                index = OffsetIndex.open(f, base, path=str(path))
                entries = list(index)
                index.validate(log_size=(path.with_suffix(".log")).stat().st_size)
            active = path.with_suffix(".log") == logs[-1]
            assert index.is_preallocated == active, path
            # DumpLogSegments prints a blank first slot of a preallocated index as "position: 0".
            dumped = [d for d in _dumped_index(produced, path) if d["position"] != "0"]
            assert [(int(d["offset"]), int(d["position"])) for d in dumped] == [
                (e.offset, e.position) for e in entries
            ]
            for entry in entries:
                batch = next(
                    b for b in batches if b.position == entry.position and b.header.base_offset >= base
                )
                assert (batch.position, batch.header.base_offset) in by_position
                assert batch.header.last_offset == entry.offset
        for path in produced.files(topic, SegmentFileKind.TIME_INDEX):
            base = _base_offset(path)
            with open(path, "rb") as f:
                index = TimeIndex.open(f, base, path=str(path))
                entries = list(index)
                index.validate()
            dumped = [d for d in _dumped_index(produced, path) if d["timestamp"] != "0"]
            assert [(int(d["timestamp"]), int(d["offset"])) for d in dumped] == [
                (e.timestamp, e.offset) for e in entries
            ]


def test_producer_snapshots_agree_with_dump_log_segments(produced: Produced) -> None:
    seen = 0
    for topic in produced.topics:
        producer_ids = {b.header.producer_id for b in produced.batches(topic)}
        for path in produced.files(topic, SegmentFileKind.PRODUCER_SNAPSHOT):
            entries = parse_producer_snapshot(path.read_bytes(), path=str(path))
            dumped = [_fields(line) for line in produced.dump[str(path)].splitlines() if line.strip()]
            assert len(entries) == len(dumped)
            entries.sort(key=lambda e: e.producer_id)
            dumped.sort(key=lambda d: int(d["producerId"]))
            for entry, theirs in zip(entries, dumped, strict=True):
                assert entry.producer_id in producer_ids
                first_txn = theirs["currentTxnFirstOffset"]
                expected_first = (
                    -1
                    if first_txn == "OptionalLong.empty"
                    else int(first_txn.removeprefix("OptionalLong[").removesuffix("]"))
                )
                assert (theirs["producerId"], theirs["producerEpoch"], theirs["coordinatorEpoch"]) == (
                    str(entry.producer_id),
                    str(entry.producer_epoch),
                    str(entry.coordinator_epoch),
                )
                assert (
                    theirs["lastSequence"],
                    theirs["lastOffset"],
                    theirs["offsetDelta"],
                    theirs["timestamp"],
                ) == (
                    str(entry.last_sequence),
                    str(entry.last_offset),
                    str(entry.offset_delta),
                    str(entry.timestamp),
                )
                assert entry.current_txn_first_offset == expected_first
                seen += 1
    assert seen > 0


def test_checkpoints_and_partition_metadata_agree_with_the_cluster(produced: Produced) -> None:
    log_dir = produced.cluster.log_dir(1)
    admin = AdminClient({"bootstrap.servers": produced.cluster.bootstrap_servers})
    descriptions = admin.describe_topics(TopicCollection(produced.topics))
    high_watermarks = read_offset_checkpoint(log_dir / "replication-offset-checkpoint")
    log_starts = read_offset_checkpoint(log_dir / "log-start-offset-checkpoint")
    recovery_points = read_offset_checkpoint(log_dir / "recovery-point-offset-checkpoint")
    for topic in produced.topics:
        topic_id = descriptions[topic].result(30).topic_id
        mask = (1 << 64) - 1
        expected = uuid.UUID(
            int=((topic_id.get_most_significant_bits() & mask) << 64)
            | (topic_id.get_least_significant_bits() & mask)
        )
        assert read_partition_metadata(produced.partition_dir(topic) / "partition.metadata") == expected
        assert read_leader_epoch_checkpoint(produced.partition_dir(topic) / "leader-epoch-checkpoint") == [
            EpochEntry(0, 0)
        ]
        tp = TopicPartition(topic, 0)
        assert high_watermarks[tp] == _log_end(produced.cluster, topic)
        assert log_starts.get(tp, 0) == 0
        assert 0 <= recovery_points.get(tp, 0) <= high_watermarks[tp]


def test_stream_validation_and_remote_index_on_real_segments(produced: Produced) -> None:
    for topic in produced.topics:
        for path in produced.files(topic, SegmentFileKind.LOG)[:-1]:
            data = path.read_bytes()
            validator = BatchStreamValidator(path=str(path))
            streamed = []
            for i in range(0, len(data), 8192):
                streamed.extend(validator.feed(data[i : i + 8192]))
            summary = validator.finish()
            with open(path, "rb") as f:
                assert streamed == list(iter_batch_headers(f))
            assert summary.end_position == len(data) and summary.batches == len(streamed)

            files = build_remote_indexes(streamed, path.name, target_entry_bytes=8192)
            offsets = RemotePointerIndex.from_bytes(files.offset_index)
            for _, header in streamed:
                position = position_for_offset(offsets, header.last_offset)
                assert position is not None
                entry = read_remote_log_entry(bytes_fetcher(files.log_index), position)
                data_id = entry.data_id
                assert data_id.object_name == path.name
                chunk = data[data_id.position : data_id.position + entry.data_length]
                held = [b.header for b in iter_batches(bytes_fetcher(chunk))]
                assert header in held


def test_damaged_real_segment_is_refused_with_its_offset(produced: Produced, tmp_path: Path) -> None:
    path = produced.files("fmt-zstd", SegmentFileKind.LOG)[0]
    batches = produced.batches("fmt-zstd")
    victim = [b for b in batches if b.end_position <= path.stat().st_size][len(batches) // 4]
    data = bytearray(path.read_bytes())
    data[victim.position + 61 + 17] ^= 0x04
    copy = tmp_path / path.name
    copy.write_bytes(bytes(data))
    with open(copy, "rb") as f, pytest.raises(CorruptDataError) as err:
        list(iter_batches(f, path=str(copy)))
    assert err.value.offset == victim.header.base_offset and err.value.path == str(copy)
    assert not isinstance(err.value, TruncatedTailError)

    copy.write_bytes(path.read_bytes()[: victim.end_position - 1])
    with open(copy, "rb") as f, pytest.raises(TruncatedTailError) as tail:
        list(iter_batches(f, path=str(copy)))
    assert tail.value.offset == victim.header.base_offset
