"""Local trim through DeleteRecords on a real broker: inside the local window, never past what is tiered,
and the partition stays continuous across the two tiers."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from harness.kafka import KafkaCluster
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore
from storage_core.remote.reader import RemoteReader

from .conftest import TieredTopic, make_topic


@pytest.fixture(scope="module")
def trim_topic(kafka_broker: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> TieredTopic:
    topic = make_topic(kafka_broker, "trim-topic", tmp_path_factory.mktemp("trim"))
    producer = Producer({"bootstrap.servers": topic.bootstrap, "enable.idempotence": True})
    for i in range(500):  # an untiered tail the trim must never reach
        producer.produce(topic.topic, value=b"tail-%d" % i, partition=0)
    assert producer.flush(30) == 0
    return topic


@pytest.fixture
def remote(trim_topic: TieredTopic, tmp_path: Path) -> Path:
    """A fresh copy of the trim topic's remote tier for one test."""
    return trim_topic.fresh_remote(tmp_path / "remote")


def _cleanup(topic: TieredTopic, remote: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Run ``tierkeeper cleanup --json`` on the file tier ``remote`` against the topic's broker."""
    return run_cli(
        "cleanup", "--remote", f"file://{remote}", "--bootstrap-servers", topic.bootstrap, *flags, "--json"
    )


def _broker_offsets(bootstrap: str, topic: str, start: int, end: int) -> list[int]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "trim-check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, start)])
    out: list[int] = []
    try:
        while not out or out[-1] < end - 1:
            msg = consumer.poll(15)
            assert msg is not None and not msg.error(), f"broker read stalled after {out[-1:]}"
            out.append(msg.offset())
    finally:
        consumer.close()
    return out


def _remote_offsets(remote: Path, topic: str) -> list[int]:
    with RemoteReader(RemoteStore(f"file://{remote}")) as reader:
        tp = reader.resolve(topic, 0)
        manifest = reader.manifest(tp, refresh=True)
        if manifest.start_offset is None:
            return []
        return [r.offset for r in reader.read_from_offset(tp, manifest.start_offset)]


def _assert_continuous(topic: TieredTopic, remote: Path, admin: KafkaAdmin) -> None:
    key = (topic.topic, 0)
    log_start, high = admin.log_start_offsets([key])[key], admin.high_watermarks([key])[key]
    remote_offsets = _remote_offsets(remote, topic.topic)
    assert remote_offsets, "the remote tier is empty"
    assert log_start <= remote_offsets[-1] + 1, "local data was trimmed past what is tiered"
    broker = _broker_offsets(topic.bootstrap, topic.topic, log_start, high)
    union = sorted(set(remote_offsets) | set(broker))
    assert union == list(range(remote_offsets[0], high)), "a gap between the tiers"


def test_local_trim_by_time_then_bytes_never_passes_the_tiered_end(
    trim_topic: TieredTopic, remote: Path
) -> None:
    admin = KafkaAdmin(trim_topic.bootstrap)
    key = (trim_topic.topic, 0)
    segments = trim_topic.segments(remote)
    tiered_end = segments[-1].end_offset
    assert admin.high_watermarks([key])[key] > tiered_end + 1, "the fixture needs an untiered tail"

    boundary = (segments[2].max_timestamp + segments[3].max_timestamp) // 2
    window_ms = int(time.time() * 1000) - boundary
    proc = _cleanup(trim_topic, remote, "--local-retention-ms", str(window_ms))
    assert proc.returncode == 0, proc.stderr
    trim = json.loads(proc.stdout)["partitions"][0]["local_trim"]
    assert trim["to"] == segments[3].base_offset
    assert admin.log_start_offsets([key])[key] == segments[3].base_offset
    _assert_continuous(trim_topic, remote, admin)

    proc = _cleanup(trim_topic, remote, "--local-retention-bytes", "1")
    assert proc.returncode == 0, proc.stderr
    assert admin.log_start_offsets([key])[key] == tiered_end + 1, (
        "trim must stop at the highest tiered offset + 1"
    )
    _assert_continuous(trim_topic, remote, admin)
    # The log start we moved ourselves never deletes remote data.
    assert [m.segment_id for m in trim_topic.segments(remote)] == [m.segment_id for m in segments]

    dry = _cleanup(trim_topic, remote, "--local-retention-bytes", "1", "--dry-run")
    assert json.loads(dry.stdout)["partitions"][0].get("local_trim") is None, "nothing more is safe to trim"


def test_a_log_start_we_did_not_set_deletes_remote_data_below_it(
    trim_topic: TieredTopic, remote: Path, tmp_path: Path
) -> None:
    admin = KafkaAdmin(trim_topic.bootstrap)
    key = (trim_topic.topic, 0)
    segments = trim_topic.segments(remote)
    user_start = max(admin.log_start_offsets([key])[key], segments[-2].base_offset)
    admin.delete_records({key: user_start})  # a user's DeleteRecords, not ours
    proc = _cleanup(trim_topic, remote)
    assert proc.returncode == 0, proc.stderr
    deleted = json.loads(proc.stdout)["partitions"][0]["deleted"]
    assert deleted and all("below the log start offset" in d["reason"] for d in deleted)
    remaining = trim_topic.segments(remote)
    assert all(m.end_offset >= user_start for m in remaining)
    assert [m.base_offset for m in segments if m.end_offset >= user_start] == [
        m.base_offset for m in remaining
    ]
    ignored = _cleanup(trim_topic, trim_topic.fresh_remote(tmp_path / "other"), "--ignore-log-start")
    assert json.loads(ignored.stdout)["partitions"][0]["deleted"] == []
