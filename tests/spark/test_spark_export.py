"""``tierkeeper export`` (a Spark job): Parquet partitioned by partition and date; a run stopped mid-export
(a task dies after writing its files, as a killed executor would leave it) and run again, then more data
tiered and exported incrementally: every record exactly once, equal to what a real consumer reads."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from storage.dataset import Dataset, consume

from harness.kafka import KafkaCluster
from harness.tierkeeper_cli import run_cli

from .conftest import Tier, copy_to


def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384, "compression.type": "zstd"}
    )
    for i in range(first, first + count):
        # Timestamps spread over three days, so the export writes several date directories.
        ts = 1_700_000_000_000 + i * 40_000
        producer.produce(topic, key=f"k{i}".encode(), value=os.urandom(200), partition=i % 2, timestamp=ts)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


@dataclass
class Target:
    """Where an export goes: its URL, and the same place as a path of the tier's filesystem."""

    url: str
    root: str
    fs: Any

    def glob(self, pattern: str) -> list[str]:
        return sorted(self.fs.glob(f"{self.root}/{pattern}"))


def _exported(target: Target) -> list[tuple[int, str, int, bytes]]:
    rows = []
    for f in target.glob("partition=*/date=*/*.parquet"):
        parts = f.split("/")
        partition = int(parts[-3].split("=", 1)[1])
        date = parts[-2].split("=", 1)[1]
        with target.fs.open(f, "rb") as handle:
            table = pq.read_table(handle)
        rows += [
            (partition, date, o, v) for o, v in zip(table["offset"].to_pylist(), table["value"].to_pylist())
        ]
    return rows


def _export_args(tier: Tier, topic: str, target: Target) -> list[str]:
    return [
        "export",
        "--topic",
        topic,
        "--to",
        target.url,
        "--spark-master",
        "local[2]",
        "--splits-per-commit",
        "3",
        "--json",
        *tier.cli_flags,
    ]


@pytest.mark.parametrize("tier_name", ["file", "s3"])
def test_export_stopped_resumed_and_incremental_holds_every_record_once(
    tk_spark: Any,
    spark_dataset: Dataset,
    kafka_broker: KafkaCluster,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    tier_name: str,
) -> None:
    tier: Tier = request.getfixturevalue(f"{tier_name}_tier")
    topic = f"spark-export-{tier_name}"
    admin = AdminClient({"bootstrap.servers": spark_dataset.bootstrap})
    config = {"internal.segment.bytes": "65536", "retention.ms": "-1"}
    for fut in admin.create_topics([NewTopic(topic, 2, 1, config=config)]).values():
        fut.result(60)
    _produce(spark_dataset.bootstrap, topic, 0, 6000)
    copy_to(tier, spark_dataset, kafka_broker, [topic])
    if tier_name == "file":
        target = Target(f"file://{tmp_path / 'export'}", str(tmp_path / "export"), tier.fs())
    else:  # beside the tier in the same bucket, reached with the same credentials
        bucket_path = f"{tier.store().root.split('/', 1)[0]}/export-{uuid.uuid4().hex[:8]}"
        target = Target(f"s3://{bucket_path}", bucket_path, tier.fs())
    state = f"{target.root}/_tierkeeper/export-state.json"

    # The first run dies at a known point: the task of partition 1's second split fails after writing
    # its files, so the target holds committed waves, files of the failed wave, and a half-done state.
    from storage_core.jobs.export import run_export
    from storage_core.spark.export_task import ExportTask, export_split
    from storage_core.spark.options import ScanOptions, StorageSpec

    def dies_midway(task: ExportTask) -> tuple[int, int, int, int]:
        result = export_split(task)
        if task.split.partition == 1 and task.split.start_offset > 0:
            raise RuntimeError("export task killed here by the test")
        return result

    source = StorageSpec(tier.url, tier.storage_options)
    with pytest.raises(Exception, match="killed here by the test"):
        run_export(
            tk_spark,
            source,
            StorageSpec(target.url, tier.storage_options),
            ScanOptions(storage=source, topic=topic),
            splits_per_commit=3,
            task=dies_midway,
        )
    partial = json.loads(target.fs.cat(state))["next_offsets"] if target.fs.exists(state) else {}
    segments = len(list(tier.fs().glob(f"{tier.store().root}/{topic}-*/1/*.log")))
    assert segments >= 3, f"partition 1 has {segments} tiered segments; the test needs several"
    ends = {p: tier.remote_end(topic, p) + 1 for p in range(2)}
    assert partial.get("1", 0) < ends[1], "nothing was left to resume"
    assert target.glob("partition=1/date=*/*.parquet"), "the failed wave left files behind"

    first = run_cli(*_export_args(tier, topic, target), env=tier.env, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    _produce(spark_dataset.bootstrap, topic, 6000, 4000)
    copy_to(tier, spark_dataset, kafka_broker, [topic])
    second = run_cli(*_export_args(tier, topic, target), env=tier.env, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads(second.stdout)
    assert summary["files_removed"] == 0
    assert json.loads(first.stdout)["files_removed"] > 0, "the resumed run removed the failed run's files"

    rows = _exported(target)
    keys = [(p, o) for p, _d, o, _v in rows]
    assert len(keys) == len(set(keys)), "a record was exported twice"
    want = []
    for p in range(2):
        until = tier.remote_end(topic, p)
        want += [
            (p, e.offset, e.value)
            for e in consume(spark_dataset.bootstrap, topic, p, "read_committed", until)
        ]
    assert sorted((p, o, v) for p, _d, o, v in rows) == sorted(want)
    assert summary["records"] == len(want) - sum(ends.values()), "the second run exported only new records"
    # Partitioned by date (UTC) of the record timestamp.
    dates = {d for _p, d, _o, _v in rows}
    assert len(dates) >= 3


def test_leftovers_of_an_unfinished_run_are_recognised() -> None:
    from storage_core.spark.export_plan import data_key, file_name, partition_of_dir, uncommitted

    assert uncommitted(f"/t/partition=0/date=2026-01-01/{file_name(500, 900)}", committed=500)
    assert not uncommitted(f"/t/partition=0/date=2026-01-01/{file_name(100, 500)}", committed=500)
    assert uncommitted("/t/partition=0/date=2026-01-01/.tmp-0123abcd", committed=500)  # a torn write
    assert not uncommitted("/t/partition=0/date=2026-01-01/notes.txt", committed=0)  # not ours: kept
    assert partition_of_dir("/t/partition=12") == 12 and partition_of_dir("/t/_tierkeeper") is None
    assert data_key("/t", 3, "2026-01-02", 7, 9) == f"/t/partition=3/date=2026-01-02/{file_name(7, 9)}"
