"""``tierkeeper recover --engine spark`` (partitions as tasks of a Spark job) restores exactly what the
in-process engine restores: the same records at the same new offsets, the same summary; and the two
engines resume each other's work (one transactional id per partition, whichever engine runs it).

Reference: a real consumer's read_committed read of the original topic before it was deleted; the
restored topics are read back by a real consumer too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from recovery.history import Rec, consume, delete_topic, produce_history, run_cli, start_cli

from harness.kafka import KafkaCluster
from storage_core.adapters.store import RemoteStore
from storage_core.faults import ENV
from storage_core.remote.reader import RemoteReader


@dataclass
class Deleted:
    bootstrap: str
    topic: str
    remote: str
    expected: dict[int, list[Rec]]


@pytest.fixture(scope="module")
def deleted(kafka_broker: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deleted]:
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"recover-spark-{uuid.uuid4().hex[:8]}"
    produce_history(bootstrap, topic)
    remote = f"file://{tmp_path_factory.mktemp('recover-spark')}"
    proc = run_cli(
        "copy", "--log-dir", str(kafka_broker.log_dir(1)), "--bootstrap-servers", bootstrap,
        "--topic", topic, "--remote", remote,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with RemoteReader(RemoteStore(remote)) as reader:
        ends = {}
        for p in range(3):
            end = reader.manifest(reader.resolve(topic, p)).end_offset
            assert end is not None and end > 1000, (p, end)
            ends[p] = end
    expected = {p: [r for r in consume(bootstrap, topic, p) if r.offset <= end] for p, end in ends.items()}
    delete_topic(bootstrap, topic)
    try:
        yield Deleted(bootstrap, topic, remote, expected)
    finally:
        delete_topic(bootstrap, topic)


def _recover(d: Deleted, *extra: str) -> dict[str, Any]:
    proc = run_cli(
        "recover", "--topic", d.topic, "--bootstrap-servers", d.bootstrap, "--remote", d.remote,
        "--transaction-records", "150", "--json", *extra, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def _restored(d: Deleted) -> dict[int, list[Rec]]:
    """What a real consumer reads from the recreated topic, and the check that it is the history."""
    got = {p: consume(d.bootstrap, d.topic, p) for p in d.expected}
    for p, want in d.expected.items():
        assert [g.content() for g in got[p]] == [w.content() for w in want], f"partition {p}"
    return got


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    # The recreated topic's id is new each time; everything else must be equal.
    return {k: v for k, v in summary.items() if k != "target_topic_id"}


def test_spark_engine_restores_exactly_what_the_local_engine_restores(d_deleted: Deleted) -> None:
    d = d_deleted
    local = _recover(d, "--engine", "local")
    assert local["complete"] and local["restored_now"] == sum(len(v) for v in d.expected.values())
    by_local = _restored(d)

    delete_topic(d.bootstrap, d.topic)
    spark = _recover(d, "--engine", "spark", "--spark-master", "local[2]")
    assert spark["target_topic_id"] != local["target_topic_id"]
    assert _comparable(spark) == _comparable(local)
    assert _restored(d) == by_local, "same records at the same new offsets"

    # A rerun on Spark finds every partition's committed progress and writes nothing.
    again = _recover(d, "--engine", "spark", "--spark-master", "local[2]")
    assert again["action"] == "resume" and again["restored_now"] == 0
    assert again["restored_total"] == local["restored_total"]


def test_a_killed_spark_restore_is_finished_by_the_local_engine_exactly_once(d_deleted: Deleted) -> None:
    d = d_deleted
    delete_topic(d.bootstrap, d.topic)
    total = sum(len(v) for v in d.expected.values())
    # Every Python worker that passes the point a 4th time (mid-partition: ~16 chunks of 150 records each)
    # kills itself with a transaction open; Spark gives up on the job (local mode: no task retries).
    proc = start_cli(
        "recover", "--topic", d.topic, "--bootstrap-servers", d.bootstrap, "--remote", d.remote,
        "--transaction-records", "150", "--json", "--engine", "spark", "--spark-master", "local[2]",
        env={ENV: "recover.chunk.produced:4"},
    )  # fmt: skip
    _out, err = proc.communicate(timeout=900)
    assert proc.returncode != 0, "the killed worker must fail the run"
    partial = sum(len(consume(d.bootstrap, d.topic, p)) for p in d.expected)
    assert 0 < partial < total, f"the kill must land mid-restore ({partial} of {total}): {err[-2000:]}"

    # The local engine reuses each partition's transactional id: it fences the dead worker's producer,
    # whose open transaction is aborted, and resumes from the committed progress.
    summary = _recover(d, "--engine", "local")
    assert summary["action"] == "resume" and summary["complete"]
    assert sum(p["restored_before"] for p in summary["partition_details"]) == partial
    assert summary["restored_now"] == total - partial
    _restored(d)


@pytest.fixture
def d_deleted(deleted: Deleted) -> Deleted:
    """The deleted topic, with whatever an earlier test recreated deleted again."""
    delete_topic(deleted.bootstrap, deleted.topic)
    return deleted


def test_recover_engine_flag_is_checked(deleted: Deleted, tmp_path: Path) -> None:
    proc = run_cli(
        "recover", "--topic", deleted.topic, "--bootstrap-servers", deleted.bootstrap,
        "--remote", deleted.remote, "--engine", "spark", "--spark-conf", "no-equals-sign",
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--spark-conf 'no-equals-sign': expected KEY=VALUE" in proc.stderr
    assert "Traceback" not in proc.stderr
