"""``tierkeeper export --format iceberg``: the table equals what a real read_committed consumer reads
(a transactional topic with aborted transactions), read back by readers we did not write (Spark's Iceberg
reader and pyiceberg's); a run killed at named points leaves the previous snapshot and the rerun
completes it exactly; of two runs racing on one table only one commits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from storage.dataset import Dataset

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from harness.tierkeeper_cli import run_cli

from .conftest import Tier, copy_to, expected

Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def _static_table(location: str, io_props: dict[str, str] | None = None) -> Any:
    """The table as pyiceberg reads it from its newest metadata file (no code of ours involved)."""
    import fsspec
    from pyiceberg.table import StaticTable

    fs, root = fsspec.core.url_to_fs(location, **_fs_options(io_props))
    hint = int(fs.cat_file(f"{root}/metadata/version-hint.text").decode())
    while fs.exists(f"{root}/metadata/v{hint + 1}.metadata.json"):
        hint += 1
    return StaticTable.from_metadata(f"{location}/metadata/v{hint}.metadata.json", properties=io_props or {})


def _fs_options(io_props: dict[str, str] | None) -> dict[str, Any]:
    if not io_props:
        return {}
    return {
        "key": io_props["s3.access-key-id"],
        "secret": io_props["s3.secret-access-key"],
        "client_kwargs": {"endpoint_url": io_props["s3.endpoint"]},
    }


def _rows_of(arrow: Any) -> list[Row]:
    headers = arrow.column("headers").to_pylist()
    return sorted(
        (p, o, k, v, tuple((h["key"], h["value"]) for h in hs or []))
        for p, o, k, v, hs in zip(
            arrow.column("partition").to_pylist(),
            arrow.column("offset").to_pylist(),
            arrow.column("key").to_pylist(),
            arrow.column("value").to_pylist(),
            headers,
        )
    )


def _want(data: Dataset, tier: Tier, topic: str, partitions: int) -> list[Row]:
    rows: list[Row] = []
    for p in range(partitions):
        for e in expected(data, topic, p, "read_committed", tier.remote_end(topic, p)):
            rows.append((p, e.offset, e.key, e.value, tuple(e.headers)))
    return sorted(rows)


def _run(spark: Any, tier: Tier, topic: str, location: str) -> Any:
    from storage_core.jobs.export_iceberg import run_export_iceberg
    from storage_core.spark.options import ScanOptions, StorageSpec

    source = StorageSpec(tier.url, tier.storage_options)
    target = StorageSpec(location, tier.storage_options)
    return run_export_iceberg(spark, source, target, ScanOptions(storage=source, topic=topic))


def _cli_args(tier: Tier, topic: str, location: str) -> list[str]:
    return [
        "export",
        "--topic",
        topic,
        "--to",
        location,
        "--format",
        "iceberg",
        "--spark-master",
        "local[2]",
        "--json",
        *tier.cli_flags,
    ]


def test_table_of_a_transactional_topic_equals_a_read_committed_consumer_file(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier, tmp_path: Path
) -> None:
    topic = spark_dataset.txn_topic
    location = f"file://{tmp_path / 'table'}"
    # The CLI as a user runs it, nothing configured: the embedded catalog beside the table.
    proc = run_cli(*_cli_args(file_tier, topic, location), env=file_tier.env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    want = _want(spark_dataset, file_tier, topic, 1)
    assert summary["records"] == len(want) and summary["next_offsets"] == {
        "0": file_tier.remote_end(topic, 0) + 1
    }

    table = _static_table(location)
    assert table.metadata.format_version == 2
    assert [f.name for f in table.spec().fields] == ["timestamp_day", "partition"]
    assert _rows_of(table.scan().to_arrow()) == want  # pyiceberg's reader

    # Spark's own Iceberg reader (iceberg-spark-runtime), by path: the Hadoop layout it knows.
    df = tk_spark.read.format("iceberg").load(location)
    spark_rows = sorted(
        (r["partition"], r["offset"], r["key"], r["value"], tuple((h["key"], h["value"]) for h in r["headers"]))
        for r in df.collect()
    )
    assert [(p, o, k, v) for p, o, k, v, _ in spark_rows] == [(p, o, k, v) for p, o, k, v, _ in want]
    assert spark_rows == want

    # A second run with nothing new tiered commits nothing.
    again = _run(tk_spark, file_tier, topic, location)
    assert again.records == 0 and again.snapshot_id == table.metadata.current_snapshot_id
