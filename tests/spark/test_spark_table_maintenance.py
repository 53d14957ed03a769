"""``tierkeeper table-maintenance`` on an exported table: compaction, snapshot expiry and orphan removal each
leave the table equal to what a read_committed consumer reads (read back by pyiceberg, code we did not
write), never delete a file a live snapshot references or a young one, and keep the export position (a
rerun exports nothing twice). The table is written by the export's own tasks, run in this process."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from storage.dataset import Dataset

from harness.tierkeeper_cli import run_cli

from .conftest import Tier
from .test_spark_export_iceberg import _rows_of, _static_table, _want

DAY_MS = 86_400_000


class InProcessTasks:
    """Runs the export's tasks one after the other in this process, where the export asks Spark to run
    them (``sparkContext.parallelize(jobs).map(task).collect()``): the subject here is maintenance, and
    the export's tasks on Spark are tests/spark/test_spark_export_iceberg.py's."""

    def __init__(self) -> None:
        self.sparkContext = self
        self._jobs: list[Any] = []

    def parallelize(self, jobs: list[Any], _slices: int) -> InProcessTasks:
        self._jobs = list(jobs)
        return self

    def map(self, task: Any) -> InProcessTasks:
        self._jobs = [task(job) for job in self._jobs]
        return self

    def collect(self) -> list[Any]:
        return self._jobs


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()}


def _referenced(location: str) -> set[str]:
    table = _static_table(location)
    out: set[str] = set()
    for snapshot in table.metadata.snapshots:
        out.add(snapshot.manifest_list.removeprefix("file://"))
        for manifest in snapshot.manifests(table.io):
            out.add(manifest.manifest_path.removeprefix("file://"))
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                out.add(entry.data_file.file_path.removeprefix("file://"))
    return out


def test_compaction_expiry_and_orphan_removal_keep_the_table_readable_and_the_position(
    spark_dataset: Dataset, file_tier: Tier, tmp_path: Path
) -> None:
    from storage_core.jobs.export_iceberg import run_export_iceberg
    from storage_core.jobs.table_maintenance import MaintenanceOptions, expire_snapshots, remove_orphans
    from storage_core.remote.reader import Isolation
    from storage_core.spark.iceberg_catalog import load_existing
    from storage_core.spark.options import ScanOptions, StorageSpec

    topic = spark_dataset.txn_topic
    root = tmp_path / "table"
    location = f"file://{root}"
    source, target = StorageSpec(file_tier.url, {}), StorageSpec(location, {})
    # One split per (small) tiered segment: many small data files per table partition, as frequent
    # exports leave them.
    opts = ScanOptions(storage=source, topic=topic, isolation=Isolation.READ_COMMITTED)
    exported = run_export_iceberg(InProcessTasks(), source, target, opts)
    want = _want(spark_dataset, file_tier, topic, 1)
    assert exported.records == len(want) and exported.files >= 2, exported

    # 1. Compaction, through the command (large ages: nothing expired or deleted yet).
    proc = run_cli(
        "table-maintenance",
        "--to",
        location,
        "--compact-min-files",
        "2",
        "--snapshot-max-age-ms",
        str(1000 * DAY_MS),
        "--orphan-min-age-ms",
        str(1000 * DAY_MS),
        "--json",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["files_compacted"] >= 2 and summary["files_written"] < summary["files_compacted"], summary
    assert (summary["expired_snapshots"], summary["orphans_deleted"], summary["rows"]) == (0, 0, len(want))
    table = _static_table(location)
    assert _rows_of(table.scan().to_arrow()) == want
    assert len(table.metadata.snapshots) == 2

    # 2. Expiry: only the current snapshot is kept; it still holds the position.
    table = load_existing(target, "t.t", None)
    now = int(time.time() * 1000)
    options = MaintenanceOptions(1, 0, DAY_MS, 0, now + 1)
    assert expire_snapshots(table, options) == 1
    table = _static_table(location)
    assert len(table.metadata.snapshots) == 1
    assert _rows_of(table.scan().to_arrow()) == want

    # 3. Orphans: the expired snapshot's files, a killed run's file (old) and a running one's (young).
    old, young = root / "data" / "killed-run.parquet", root / "data" / "running-export.parquet"
    old.write_bytes(b"x")
    young.write_bytes(b"y")
    two_days_ago = time.time() - 2 * DAY_MS / 1000
    for path in _files(root):
        if path != str(young):
            os.utime(path, (two_days_ago, two_days_ago))
    live = _referenced(location)
    before = _files(root)
    deleted = remove_orphans(load_existing(target, "t.t", None), target, DAY_MS, now)
    after = _files(root)
    assert deleted == len(before - after) and deleted >= 2
    assert str(old) not in after and str(young) in after
    assert live <= after  # no referenced file was touched
    assert {p for p in before - after if p.endswith(".metadata.json")} == set()
    assert _rows_of(_static_table(location).scan().to_arrow()) == want

    # The position survived all three: a rerun exports nothing and keeps the snapshot.
    again = run_export_iceberg(InProcessTasks(), source, target, opts)
    assert again.records == 0 and again.next_offsets == exported.next_offsets
    assert again.snapshot_id == _static_table(location).metadata.current_snapshot_id
