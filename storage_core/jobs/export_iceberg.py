"""``tierkeeper export --format iceberg``: a topic's remote tier appended to an Apache Iceberg table (format
v2), one snapshot per run (table layout and bookkeeping: spark/iceberg_table.py; catalogs and the commit:
spark/iceberg_catalog.py).

A run: open (or create) the table -> read the committed position from the current snapshot's ancestry ->
plan splits from there to the remote tier's end -> Spark tasks write every split's data files -> ONE
commit: a snapshot appending all of them, its summary holding each partition's next offset, required to
build on the snapshot the run started from. Until that commit no reader sees a file of the run; a run
killed before it leaves only unreferenced files (orphans, for the table's orphan-file cleanup) and the next
run plans from the same position, so every record lands exactly once. Of two runs racing on one table
the second commit fails (CommitFailedException, ``ExportConflict`` here) and deletes its files; its
records are the winner's or the next run's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage_core.adapters.schema_registry import SchemaRegistry
from storage_core.errors import TierkeeperError
from storage_core.faults import fault_point
from storage_core.formats.value_decoding import ValueDecoding, merge_types
from storage_core.jobs.export import Guarded, plan_splits
from storage_core.remote.reader import ReadOptions, RemoteReader
from storage_core.spark.iceberg_catalog import CatalogConfig, open_table
from storage_core.spark.iceberg_table import (
    add_decoded_columns,
    committed_offsets,
    default_table_name,
    summary_properties,
)
from storage_core.spark.iceberg_task import IcebergTask, MissingColumns, SplitFiles, write_split
from storage_core.spark.options import ScanOptions, StorageSpec

log = logging.getLogger(__name__)


class ExportConflict(TierkeeperError):
    """Another export committed to the table while this run was writing; nothing of this run is committed."""


@dataclass(frozen=True)
class IcebergExportSummary:
    topic: str
    table: str
    location: str
    records: int
    files: int
    splits: int
    snapshot_id: int | None
    next_offsets: dict[int, int]
    rows: int | None = None
    """Rows in the table's current snapshot (its summary's total-records)."""


def run_export_iceberg(
    spark: Any,
    source: StorageSpec,
    target: StorageSpec,
    opts: ScanOptions,
    *,
    table_name: str | None = None,
    catalog: CatalogConfig | None = None,
    value_decoding: ValueDecoding | None = None,
    task: Callable[[IcebergTask], SplitFiles | MissingColumns] = write_split,
) -> IcebergExportSummary:
    """Export what is tiered and not yet in the table, in one commit. ``task`` runs one split on an
    executor (tests hand in one that fails at a chosen split).

    With ``value_decoding`` a split whose values have fields the table lacks writes nothing and reports
    them; the driver adds them to the table (a schema commit: no snapshot, no rows) and runs those splits
    again. The last of ``DECODE_ROUNDS`` rounds writes such values anyway, the fields it still lacks named
    in their error column (values whose fields keep changing type, say)."""
    with RemoteReader(source.open(), ReadOptions(isolation=opts.isolation)) as reader:
        tp0 = reader.resolve(opts.topic, 0, opts.topic_id)
        name = table_name or default_table_name(tp0.topic)
        table = open_table(target, tp0.topic, tp0.topic_id, name, catalog)
        committed = committed_offsets(table.metadata, tp0.topic, tp0.topic_id)
        splits = plan_splits(reader, opts, committed)
    base = table.metadata.current_snapshot_id
    if not splits:
        return IcebergExportSummary(
            tp0.topic, name, table.metadata.location, 0, 0, 0, base, committed, _rows(table)
        )
    results: list[SplitFiles] = []
    pending = splits
    registry = None
    if value_decoding is not None:
        _widen(table, None, [])
        if value_decoding.schema_registry is not None:
            registry = SchemaRegistry.from_env(value_decoding.schema_registry)
    final = value_decoding is None
    for round_ in range(DECODE_ROUNDS if value_decoding is not None else 1):
        final = final or round_ == DECODE_ROUNDS - 1
        jobs = [
            IcebergTask(source, target, opts.isolation, s, table.metadata, value_decoding, registry, final)
            for s in pending
        ]
        outcomes = spark.sparkContext.parallelize(jobs, len(jobs)).map(Guarded(task)).collect()
        results += [o for o in outcomes if isinstance(o, SplitFiles)]
        failed = [o for o in outcomes if isinstance(o, TierkeeperError)]
        if failed:
            _discard(table, [f for r in results for f in r.files])
            raise failed[0]
        lacking = [o for o in outcomes if isinstance(o, MissingColumns)]
        if not lacking:
            break
        missing = None
        for m in lacking:
            missing = merge_types(missing, m.missing)
        # Fields the table cannot take (a name Iceberg refuses, say) are named in value_error instead.
        final = not _widen(table, missing, results)
        pending = [m.split for m in lacking]
    files = [f for r in results for f in r.files]
    next_offsets = dict(committed)
    for r in results:
        next_offsets[r.partition] = max(next_offsets.get(r.partition, 0), r.end)
    records = sum(r.rows for r in results)
    fault_point("export.iceberg.committing")
    if files or next_offsets != committed:
        _commit(table, files, summary_properties(tp0.topic, tp0.topic_id, next_offsets))
    snapshot = table.metadata.current_snapshot_id
    return IcebergExportSummary(
        tp0.topic,
        name,
        table.metadata.location,
        records,
        len(files),
        len(splits),
        snapshot,
        next_offsets,
        _rows(table),
    )


DECODE_ROUNDS = 3


def _widen(table: Any, missing: Any, results: list[SplitFiles]) -> bool:
    """Add the error column and the ``missing`` decoded fields; False when the table refuses them."""
    from pyiceberg.exceptions import CommitFailedException, ValidationError

    try:
        add_decoded_columns(table, missing)
        return True
    except (ValidationError, ValueError, TypeError) as exc:
        log.warning(
            "table %s: decoded fields not added (%s); named in value_error", table.metadata.location, exc
        )
        return False
    except CommitFailedException as exc:
        _discard(table, [f for r in results for f in r.files])
        raise ExportConflict(
            f"table {table.metadata.location}: another writer changed the table's schema first ({exc}); "
            "nothing of this run is committed, run the export again"
        ) from None


def _rows(table: Any) -> int | None:
    snapshot = table.metadata.current_snapshot()
    total = snapshot.summary.get("total-records") if snapshot is not None and snapshot.summary else None
    return int(total) if total is not None else None


def _commit(table: Any, files: list[Any], properties: dict[str, str]) -> None:
    """One snapshot appending ``files``, required to build on the snapshot the table was loaded at (the
    append's AssertRefSnapshotId), so a run whose base moved fails instead of committing offsets twice."""
    from pyiceberg.exceptions import CommitFailedException

    transaction = table.transaction()
    try:
        with transaction.update_snapshot(snapshot_properties=properties).fast_append() as append:
            for data_file in files:
                append.append_data_file(data_file)
        transaction.commit_transaction()
    except CommitFailedException as exc:
        # The commit was refused, so no snapshot references these files: they are ours to delete. (An
        # unknown outcome, e.g. a REST timeout, is another exception and leaves them: they may be live.)
        _discard(table, files)
        raise ExportConflict(
            f"table {table.metadata.location}: another export committed first ({exc}); nothing of this run "
            "is committed, run the export again"
        ) from None


def _discard(table: Any, files: list[Any]) -> None:
    """Best effort: files no snapshot references are invisible anyway; this only saves the space."""
    for data_file in files:
        try:
            table.io.delete(data_file.file_path)
        except Exception as exc:  # noqa: BLE001 -- an orphan left is harmless, the run's error matters
            log.warning("could not delete uncommitted data file %s: %s", data_file.file_path, exc)
