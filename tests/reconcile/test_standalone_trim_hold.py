"""``tierkeeper standalone`` on a real broker with a consumer group that reads the brokers directly: its
committed offset, below the local window, holds the trim; the status says so (``status.trimHold``, the
``TrimHeld`` condition, the table's HELD column and its line); the group resumes with
``auto.offset.reset=latest`` and reads every record after its commit; once it has caught up, the next
cleanup trims past the old point and the condition goes."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from test_standalone_real_kafka import Clock, create_topic, produce, write_setup

from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.cli.standalone import status_table, trim_hold_lines
from storage_core.jobs.resource_files import load_clusters, load_manifests
from storage_core.jobs.standalone import Standalone

RECORDS = 2000
COMMITTED = 300


def _consumer(kafka: KafkaCluster, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "latest",  # Kafka's default: an out-of-range commit would jump to the end
            "enable.auto.commit": False,
        }
    )


def _read_from_commit(kafka: KafkaCluster, group: str, topic: str, end: int) -> list[int]:
    """Resume ``group`` from its committed offset up to ``end``, commit there: the offsets it got."""
    consumer = _consumer(kafka, group)
    consumer.subscribe([topic])
    got: list[int] = []
    try:
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=90)
        while (not got or got[-1] < end - 1) and datetime.datetime.now() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append(message.offset())
        consumer.commit(offsets=[TopicPartition(topic, 0, end)], asynchronous=False)
    finally:
        consumer.close()
    return got


def test_a_direct_groups_commit_holds_the_trim_in_standalone_and_the_status_shows_it(
    kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = f"held-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker, topic, 1, {"internal.segment.bytes": str(16 * 1024), "retention.ms": "-1"})
    produce(kafka_broker, topic, RECORDS, 300)
    group = f"direct-{topic}"
    committer = _consumer(kafka_broker, group)  # commits and leaves: a group with no members, as a job's
    committer.commit(offsets=[TopicPartition(topic, 0, COMMITTED)], asynchronous=False)
    committer.close()
    spec = {"localRetentionMs": 0, "cleanup": {"intervalSeconds": 60}}  # the window trims all tiered
    cluster_file, manifests = write_setup(tmp_path, kafka_broker, {topic: spec})
    clock = Clock()
    runner = Standalone(load_clusters([cluster_file]), load_manifests(manifests), clock=clock)

    runner.run_round()  # copy, then the cleanup: the window would trim far past the group's commit
    status = runner.topic_status[f"t/{topic}"]
    assert status.last_cleanup is not None and status.last_cleanup.result == "Succeeded", status
    hold = status.trim_hold
    assert hold is not None and hold.held_partitions == 1, status
    (partition,) = hold.partitions
    assert [(h.group, h.offset) for h in partition.held_by] == [(group, COMMITTED)]
    assert partition.window_to is not None and partition.window_to > COMMITTED
    admin = KafkaAdmin(kafka_broker.bootstrap_servers)
    log_start = admin.log_start_offsets([(topic, 0)])[(topic, 0)]
    assert log_start <= COMMITTED  # the brokers still hold everything after the commit
    held = {c.type: c for c in status.conditions}
    assert held["Ready"].status == "True" and (held["TrimHeld"].status, held["TrimHeld"].reason) == (
        "True",
        "TrimHeld",
    )
    assert f"by group {group} at offset {COMMITTED}" in held["TrimHeld"].message
    header, row = status_table(runner).splitlines()[:2]
    assert row[header.index("HELD") :].split()[0] == "1"
    (line,) = trim_hold_lines(runner)
    assert line.startswith(f"trim hold t/{topic}: TrimHeld: ") and group in line

    # The group resumes from its commit, as Kafka's defaults have it (latest): nothing was lost.
    got = _read_from_commit(kafka_broker, group, topic, RECORDS)
    assert got == list(range(COMMITTED, RECORDS))

    clock.now += datetime.timedelta(minutes=5)  # the next cleanup is due
    runner.run_round()
    after = runner.topic_status[f"t/{topic}"]
    assert after.trim_hold is not None and after.trim_hold.held_partitions == 0, after
    assert "TrimHeld" not in {c.type for c in after.conditions}
    assert admin.log_start_offsets([(topic, 0)])[(topic, 0)] > COMMITTED  # the trim moved on
    assert trim_hold_lines(runner) == []
