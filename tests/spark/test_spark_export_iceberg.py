"""``tierkeeper export --format iceberg``: the table equals what a real read_committed consumer reads
(a transactional topic with aborted transactions), read back by readers we did not write (Spark's Iceberg
reader and pyiceberg's); a run killed at named points leaves the previous snapshot and the rerun
completes it exactly; of two runs racing on one table only one commits."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from reliability.paused_cli import start_paused
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
    from storage_core.remote.reader import Isolation
    from storage_core.spark.options import ScanOptions, StorageSpec

    source = StorageSpec(tier.url, tier.storage_options)
    target = StorageSpec(location, tier.storage_options)
    opts = ScanOptions(storage=source, topic=topic, isolation=Isolation.READ_COMMITTED)  # the CLI's default
    return run_export_iceberg(spark, source, target, opts)


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
        (
            r["partition"],
            r["offset"],
            r["key"],
            r["value"],
            tuple((h["key"], h["value"]) for h in r["headers"]),
        )
        for r in df.collect()
    )
    assert [(p, o, k, v) for p, o, k, v, _ in spark_rows] == [(p, o, k, v) for p, o, k, v, _ in want]
    assert spark_rows == want

    # A second run with nothing new tiered commits nothing.
    again = _run(tk_spark, file_tier, topic, location)
    assert again.records == 0 and again.snapshot_id == table.metadata.current_snapshot_id


def test_table_on_s3_equals_a_read_committed_consumer_and_a_stale_commit_is_refused(
    tk_spark: Any, spark_dataset: Dataset, s3_tier: Tier, moto_server: MotoServer
) -> None:
    from storage_core.jobs.export_iceberg import ExportConflict, _commit
    from storage_core.spark.iceberg_catalog import open_table
    from storage_core.spark.iceberg_table import summary_properties
    from storage_core.spark.options import StorageSpec

    topic = spark_dataset.txn_topic
    bucket = s3_tier.store().root.split("/", 1)[0]
    location = f"s3://{bucket}/table-{uuid.uuid4().hex[:8]}"
    summary = _run(tk_spark, s3_tier, topic, location)
    want = _want(spark_dataset, s3_tier, topic, 1)
    assert summary.records == len(want)
    opts = s3_tier.storage_options
    io_props = {
        "s3.endpoint": moto_server.endpoint_url,
        "s3.access-key-id": opts["key"],
        "s3.secret-access-key": opts["secret"],
    }
    table = _static_table(location, io_props)
    assert _rows_of(table.scan().to_arrow()) == want  # pyiceberg's reader, through S3

    # A run whose table moved under it (another export committed) is refused on S3 too: the conditional
    # PUT of the next metadata version and the branch requirement both say no.
    target = StorageSpec(location, opts)
    topic_id = _topic_id(s3_tier, topic)
    stale = open_table(target, topic, topic_id, "t.t", None)
    fresh = open_table(target, topic, topic_id, "t.t", None)
    _commit(fresh, [], summary_properties(topic, topic_id, summary.next_offsets))
    with pytest.raises(ExportConflict, match="another export committed first"):
        _commit(stale, [], summary_properties(topic, topic_id, summary.next_offsets))


def _topic_id(tier: Tier, topic: str) -> str:
    from storage_core.remote.reader import RemoteReader

    with RemoteReader(tier.store()) as reader:
        return reader.resolve(topic, 0).topic_id


def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    # Small batches: the topic's 64 KiB segments roll several times, so several are tiered.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384, "compression.type": "zstd"}
    )
    for i in range(first, first + count):
        # Timestamps over three days: the table has several day partitions.
        ts = 1_700_000_000_000 + i * 40_000
        producer.produce(topic, key=f"k{i}".encode(), value=os.urandom(100), partition=i % 2, timestamp=ts)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def test_killed_runs_leave_the_last_snapshot_and_of_two_racing_runs_one_commits(
    tk_spark: Any, spark_dataset: Dataset, kafka_broker: KafkaCluster, file_tier: Tier, tmp_path: Path
) -> None:
    topic = "spark-iceberg-kill"
    admin = AdminClient({"bootstrap.servers": spark_dataset.bootstrap})
    config = {"internal.segment.bytes": "65536", "retention.ms": "-1"}
    for fut in admin.create_topics([NewTopic(topic, 2, 1, config=config)]).values():
        fut.result(60)
    _produce(spark_dataset.bootstrap, topic, 0, 3000)
    copy_to(file_tier, spark_dataset, kafka_broker, [topic])
    location = f"file://{tmp_path / 'table'}"
    first = _run(tk_spark, file_tier, topic, location)
    tiered = {p: file_tier.remote_end(topic, p) + 1 for p in range(2)}
    assert first.records == sum(tiered.values()) and first.snapshot_id is not None
    _produce(spark_dataset.bootstrap, topic, 3000, 2000)
    copy_to(file_tier, spark_dataset, kafka_broker, [topic])
    data_files = lambda: set((tmp_path / "table" / "data").rglob("*.parquet"))  # noqa: E731
    committed_files = data_files()

    # Killed in a Spark task after it stored a split's files, then killed on the driver with every file
    # stored and the commit not sent: each time the table is still at the first run's snapshot.
    for point in ("export.iceberg.split.written", "export.iceberg.committing"):
        killed = run_cli(
            *_cli_args(file_tier, topic, location),
            env={**file_tier.env, "TIERKEEPER_FAULT": f"{point}:1:kill"},
            timeout=900,
        )
        assert killed.returncode != 0, f"{point}: {killed.stdout}"
        assert _static_table(location).metadata.current_snapshot_id == first.snapshot_id, point
    assert data_files() > committed_files, "the killed runs stored files (orphans no snapshot names)"

    # Two runs race: A has stored its files and is about to commit when B runs and commits. A's commit
    # is refused, nothing of it becomes visible, and it deletes the files it wrote.
    before_race = data_files()
    racer = start_paused(
        _cli_args(file_tier, topic, location), "export.iceberg.committing", 600, file_tier.env
    )
    try:
        winner = _run(tk_spark, file_tier, topic, location)
        assert winner.records == sum(file_tier.remote_end(topic, p) + 1 for p in range(2)) - first.records
    finally:
        os.kill(racer.pid, signal.SIGCONT)
    out, err = racer.communicate(timeout=600)
    assert racer.returncode != 0 and "another export committed first" in err, (out, err[-3000:])

    table = _static_table(location)
    assert table.metadata.current_snapshot_id == winner.snapshot_id
    exports = [s for s in table.metadata.snapshots if s.summary and s.summary.get("tierkeeper.next-offsets")]
    assert len(exports) == 2, "one snapshot per committed run, none of the killed or refused runs"
    ends = {str(p): file_tier.remote_end(topic, p) + 1 for p in range(2)}
    assert json.loads(exports[-1].summary["tierkeeper.next-offsets"]) == ends
    assert _rows_of(table.scan().to_arrow()) == _want(spark_dataset, file_tier, topic, 2)
    live = {Path(f.file.file_path.removeprefix("file://")) for f in table.scan().plan_files()}
    assert data_files() - before_race == live - committed_files, "the refused run deleted its files"


def test_a_configured_catalog_commits_the_table_and_refuses_a_stale_commit(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier, tmp_path: Path
) -> None:
    """``--catalog``: pyiceberg's SQL catalog on SQLite stands for REST, Hive and Glue (same commit path:
    the catalog checks the requirements)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from storage_core.jobs.export_iceberg import (
        ExportConflict,
        IcebergExportSummary,
        _commit,
        run_export_iceberg,
    )
    from storage_core.remote.reader import Isolation
    from storage_core.spark.iceberg_catalog import CatalogConfig, open_table
    from storage_core.spark.iceberg_table import summary_properties
    from storage_core.spark.options import ScanOptions, StorageSpec

    topic = spark_dataset.txn_topic
    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    catalog = CatalogConfig("lake", {"type": "sql", "uri": uri})
    location = f"file://{tmp_path / 'table'}"
    source, target = StorageSpec(file_tier.url), StorageSpec(location)
    scan = ScanOptions(storage=source, topic=topic, isolation=Isolation.READ_COMMITTED)

    def export() -> IcebergExportSummary:
        """Export the topic read_committed into the ``kafka.txn`` table through the catalog."""
        return run_export_iceberg(tk_spark, source, target, scan, table_name="kafka.txn", catalog=catalog)

    summary = export()
    table = SqlCatalog("lake", uri=uri).load_table("kafka.txn")  # the catalog's own view, not ours
    assert table.metadata.current_snapshot_id == summary.snapshot_id
    assert _rows_of(table.scan().to_arrow()) == _want(spark_dataset, file_tier, topic, 1)

    topic_id = _topic_id(file_tier, topic)
    stale = open_table(target, topic, topic_id, "kafka.txn", catalog)
    fresh = open_table(target, topic, topic_id, "kafka.txn", catalog)
    _commit(fresh, [], summary_properties(topic, topic_id, summary.next_offsets))
    with pytest.raises(ExportConflict, match="another export committed first"):
        _commit(stale, [], summary_properties(topic, topic_id, summary.next_offsets))

    # Maintenance commits through the catalog too; one that builds on a moved table is refused.
    from storage_core.jobs.table_maintenance import (
        MaintenanceConflict,
        MaintenanceOptions,
        compact,
        remove_orphans,
        run_table_maintenance,
    )
    from storage_core.spark.iceberg_catalog import load_existing

    before_maintenance = load_existing(target, "kafka.txn", catalog)
    now = int(time.time() * 1000)
    keep_orphans = MaintenanceOptions(1, 0, 1 << 50, 2, now + 1)
    done = run_table_maintenance(target, "kafka.txn", catalog, keep_orphans)
    assert done.files_compacted >= 2 and done.expired_snapshots >= 1 and done.orphans_deleted == 0, done
    table = SqlCatalog("lake", uri=uri).load_table("kafka.txn")
    assert len(table.metadata.snapshots) == 1 and table.metadata.current_snapshot_id == done.snapshot_id
    assert _rows_of(table.scan().to_arrow()) == _want(spark_dataset, file_tier, topic, 1)
    data_files = {p for p in (tmp_path / "table" / "data").rglob("*") if p.is_file()}
    with pytest.raises(MaintenanceConflict, match="another writer committed first"):
        compact(before_maintenance, target, 2)
    # Its new data files are deleted; the manifests pyiceberg wrote for the refused commit are orphans.
    assert {p for p in (tmp_path / "table" / "data").rglob("*") if p.is_file()} == data_files
    assert remove_orphans(load_existing(target, "kafka.txn", catalog), target, 0, now + 1) >= 2
    table = SqlCatalog("lake", uri=uri).load_table("kafka.txn")
    assert _rows_of(table.scan().to_arrow()) == _want(spark_dataset, file_tier, topic, 1)
    rerun = export()
    assert rerun.records == 0 and rerun.next_offsets == summary.next_offsets  # the position survived
