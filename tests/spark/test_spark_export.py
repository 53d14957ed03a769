"""``tierkeeper export`` (a Spark job): Parquet partitioned by partition and date; a run killed mid-export
and run again, then more data tiered and exported incrementally, leaves every record exactly once and
equal to what a real consumer reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from storage.dataset import Dataset, consume

from harness.kafka import KafkaCluster
from harness.tierkeeper_cli import run_cli

from .conftest import Tier, copy_to


def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "zstd"})
    for i in range(first, first + count):
        # Timestamps spread over three days, so the export writes several date directories.
        ts = 1_700_000_000_000 + i * 40_000
        producer.produce(topic, key=f"k{i}".encode(), value=os.urandom(200), partition=i % 2, timestamp=ts)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def _exported(target: Path) -> list[tuple[int, str, int, bytes]]:
    rows = []
    for f in sorted(target.glob("partition=*/date=*/*.parquet")):
        partition = int(f.parent.parent.name.split("=", 1)[1])
        date = f.parent.name.split("=", 1)[1]
        table = pq.read_table(f)
        rows += [
            (partition, date, o, v) for o, v in zip(table["offset"].to_pylist(), table["value"].to_pylist())
        ]
    return rows


def _export_args(tier: Tier, topic: str, target: Path) -> list[str]:
    return [
        "export",
        "--topic",
        topic,
        "--to",
        f"file://{target}",
        "--spark-master",
        "local[2]",
        "--splits-per-commit",
        "3",
        "--json",
        *tier.cli_flags,
    ]


def test_export_killed_resumed_and_incremental_holds_every_record_once(
    spark_dataset: Dataset, file_tier: Tier, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = "spark-export"
    admin = AdminClient({"bootstrap.servers": spark_dataset.bootstrap})
    config = {"internal.segment.bytes": "65536", "retention.ms": "-1"}
    for fut in admin.create_topics([NewTopic(topic, 2, 1, config=config)]).values():
        fut.result(60)
    _produce(spark_dataset.bootstrap, topic, 0, 6000)
    copy_to(file_tier, spark_dataset, kafka_broker, [topic])
    target = tmp_path / "export"
    state = target / "_tierkeeper" / "export-state.json"

    # Kill the first run (the CLI and its Spark JVM) once its first wave is committed.
    proc = subprocess.Popen(
        [sys.executable, "-m", "storage_core.cli", *_export_args(file_tier, topic, target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, **file_tier.env},
    )
    deadline = time.monotonic() + 300
    while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(60)
    assert proc.returncode == -signal.SIGKILL, "the export finished before it could be killed"
    partial = json.loads(state.read_text())["next_offsets"]
    ends = {p: file_tier.remote_end(topic, p) + 1 for p in range(2)}
    assert any(partial.get(str(p), 0) < ends[p] for p in range(2)), "nothing was left to resume"

    first = run_cli(*_export_args(file_tier, topic, target), env=file_tier.env, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    _produce(spark_dataset.bootstrap, topic, 6000, 4000)
    copy_to(file_tier, spark_dataset, kafka_broker, [topic])
    second = run_cli(*_export_args(file_tier, topic, target), env=file_tier.env, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads(second.stdout)
    assert summary["files_removed"] == 0

    rows = _exported(target)
    keys = [(p, o) for p, _d, o, _v in rows]
    assert len(keys) == len(set(keys)), "a record was exported twice"
    want = []
    for p in range(2):
        until = file_tier.remote_end(topic, p)
        want += [
            (p, e.offset, e.value)
            for e in consume(spark_dataset.bootstrap, topic, p, "read_committed", until)
        ]
    assert sorted((p, o, v) for p, _d, o, v in rows) == sorted(want)
    assert summary["records"] == len(want) - sum(ends.values()), "the second run exported only new records"
    # Partitioned by date (UTC) of the record timestamp.
    dates = {d for _p, d, _o, _v in rows}
    assert len(dates) >= 3
