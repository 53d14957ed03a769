"""``tierkeeper table-maintenance``: keep an exported Iceberg table small and fast to plan, without ever
losing a row a live snapshot holds or the position the next export starts from.

In this order, each step committed (or not) on its own:

1. **Compaction**: in every table partition (day, Kafka partition) holding at least ``compact_min_files``
   small data files, rewrite them into one file, sorted by offset, in an ``overwrite`` snapshot that
   deletes exactly those files and adds the new one. It carries the export position
   (``tierkeeper.next-offsets``) of the snapshot it builds on and must build on the current snapshot, so
   an export committing meanwhile makes it fail (``MaintenanceConflict``; its new data files deleted, the
   manifests of the refused commit left as orphans) rather than lose a row.
2. **Snapshot expiry**: remove snapshots older than ``snapshot_max_age_ms`` except the newest
   ``keep_snapshots``, the heads of branches and tags, and the current snapshot's ancestry down to the
   newest snapshot holding the export position (the next export reads it there).
3. **Orphan removal**: delete files under ``data/`` and ``metadata/`` that no remaining snapshot
   references (data files, manifests, manifest lists, statistics) and that are older than
   ``orphan_min_age_ms``: a running export's files are referenced only once it commits, so the age must
   exceed the longest export run. Table metadata files (``*.metadata.json``, ``version-hint.text``) are
   left to step 4.
4. **Old metadata files**: every commit writes a new ``*.metadata.json``; those neither current nor in the
   current metadata's log (which commits trim to ``write.metadata.previous-versions-max``, 100 unless the
   table says otherwise) are deleted once older than ``orphan_min_age_ms``, oldest version first, unless
   the table sets ``write.metadata.delete-after-commit.enabled`` to false. The age matters for the
   embedded catalog, whose commit is "create version N+1 if absent": a writer that read version N more
   than that long ago (longer than any export run) cannot still be about to create N+1 after N+1 was
   deleted. (Configured catalogs also delete them at commit time: pyiceberg does when the property is
   true, as the export creates tables.)

Expired snapshots' files are deleted by step 3 of the same or a later run (once old enough).
"""

from __future__ import annotations

import logging
import posixpath
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from storage_core.errors import ConfigError, TierkeeperError
from storage_core.reconcile.requests import MaintenancePolicy
from storage_core.spark.iceberg_catalog import CatalogConfig, load_existing
from storage_core.spark.iceberg_table import NEXT_OFFSETS, PARTITION_FIELD, TOPIC, TOPIC_ID
from storage_core.spark.iceberg_task import write_data_files
from storage_core.spark.options import StorageSpec

log = logging.getLogger(__name__)

SMALL_FILE_BYTES = 128 << 20
"""A data file below this size is small (a quarter of the table's target file size)."""
MAX_REWRITE_BYTES = 512 << 20
"""At most this many bytes of small files are rewritten into one file (bounds the run's memory)."""


@dataclass(frozen=True)
class MaintenanceOptions(MaintenancePolicy):
    """The policy of one run, and the time its ages are measured from."""

    now_ms: int


@dataclass(frozen=True)
class MaintenanceSummary:
    table: str
    location: str
    files_compacted: int
    files_written: int
    expired_snapshots: int
    orphans_deleted: int
    snapshot_id: int | None
    rows: int | None
    metadata_files_deleted: int = 0


def run_table_maintenance(
    target: StorageSpec, table_name: str, catalog: CatalogConfig | None, options: MaintenanceOptions
) -> MaintenanceSummary:
    table = load_existing(target, table_name, catalog)
    compacted, written = (0, 0)
    if options.compact_min_files > 0:
        compacted, written = compact(table, target, options.compact_min_files)
        table = load_existing(target, table_name, catalog)
    expired = expire_snapshots(table, options)
    table = load_existing(target, table_name, catalog)
    orphans = remove_orphans(table, target, options.orphan_min_age_ms, options.now_ms)
    old_metadata = remove_old_metadata(table, target, options.orphan_min_age_ms, options.now_ms)
    snapshot = table.metadata.current_snapshot()
    rows = _rows(snapshot)
    return MaintenanceSummary(
        table_name,
        table.metadata.location,
        compacted,
        written,
        expired,
        orphans,
        snapshot.snapshot_id if snapshot is not None else None,
        rows,
        old_metadata,
    )


def _rows(snapshot: Any) -> int | None:
    if snapshot is None or snapshot.summary is None:
        return None
    total = snapshot.summary.get("total-records")
    return int(total) if total is not None else None


# ---- compaction --------------------------------------------------------------------------------------


def _live_files(table: Any) -> list[Any]:
    """The data files of the current snapshot."""
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return []
    out = []
    for manifest in snapshot.manifests(table.io):
        out += [entry.data_file for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)]
    return out


def _groups(files: Iterable[Any], min_files: int) -> list[list[Any]]:
    """Small files by table partition, as rewrite batches of at least ``min_files`` files."""
    by_partition: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    for f in files:
        if f.file_size_in_bytes < SMALL_FILE_BYTES and f.content.value == 0:  # data, not delete files
            by_partition[(f.spec_id, *f.partition)].append(f)
    batches = []
    for group in by_partition.values():
        batch: list[Any] = []
        size = 0
        for f in sorted(group, key=lambda f: f.file_path):
            if batch and size + f.file_size_in_bytes > MAX_REWRITE_BYTES:
                batches.append(batch)
                batch, size = [], 0
            batch.append(f)
            size += f.file_size_in_bytes
        batches.append(batch)
    return [b for b in batches if len(b) >= min_files]


def compact(table: Any, target: StorageSpec, min_files: int) -> tuple[int, int]:
    """Rewrite each batch of small files into one; returns (files rewritten, files written)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    batches = _groups(_live_files(table), min_files)
    if not batches:
        return 0, 0
    snapshot = table.metadata.current_snapshot()
    # The position stays on the current snapshot: the next export reads it there.
    summary = snapshot.summary
    position = {k: summary[k] for k in (NEXT_OFFSETS, TOPIC, TOPIC_ID) if summary and summary.get(k)}
    old: list[Any] = []
    new: list[Any] = []
    for batch in batches:
        parts = []
        for f in batch:
            with table.io.new_input(f.file_path).open() as stream:
                parts.append(pq.read_table(stream))
        rows = pa.concat_tables(parts).sort_by([("offset", "ascending")])
        partition = int(rows.column(PARTITION_FIELD)[0].as_py())
        new += write_data_files(table.metadata, rows, target, partition)
        old += batch
    from pyiceberg.exceptions import CommitFailedException

    transaction = table.transaction()
    try:
        with transaction.update_snapshot(snapshot_properties=position).overwrite() as rewrite:
            for f in old:
                rewrite.delete_data_file(f)
            for f in new:
                rewrite.append_data_file(f)
        transaction.commit_transaction()
    except CommitFailedException as exc:
        for f in new:  # referenced by no snapshot: ours to delete (else an orphan for a later run)
            try:
                table.io.delete(f.file_path)
            except OSError as gone:
                log.warning("could not delete uncommitted file %s: %s", f.file_path, gone)
        raise MaintenanceConflict(_conflict(table, exc)) from None
    return len(old), len(new)


class MaintenanceConflict(TierkeeperError):
    """Another writer (an export) committed while maintenance ran; nothing of this step is committed."""


def _conflict(table: Any, exc: Exception) -> str:
    return (
        f"table {table.metadata.location}: another writer committed first ({exc}); nothing of this step is "
        "committed, run table-maintenance again"
    )


# ---- snapshot expiry ---------------------------------------------------------------------------------


def _position_ancestry(metadata: Any) -> set[int]:
    """The current snapshot's ancestry down to (and with) the newest snapshot holding the export position."""
    keep: set[int] = set()
    snapshot_id = metadata.current_snapshot_id
    while snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            break
        keep.add(snapshot_id)
        if snapshot.summary is not None and snapshot.summary.get(NEXT_OFFSETS) is not None:
            break
        snapshot_id = snapshot.parent_snapshot_id
    return keep


def expirable(metadata: Any, options: MaintenanceOptions) -> list[int]:
    """The snapshots expiry removes (see the module docstring)."""
    newest = sorted(metadata.snapshots, key=lambda s: s.timestamp_ms, reverse=True)
    keep = {s.snapshot_id for s in newest[: options.keep_snapshots]}
    keep |= {ref.snapshot_id for ref in metadata.refs.values()}
    keep |= _position_ancestry(metadata)
    cutoff = options.now_ms - options.snapshot_max_age_ms
    return [s.snapshot_id for s in newest if s.snapshot_id not in keep and s.timestamp_ms < cutoff]


def expire_snapshots(table: Any, options: MaintenanceOptions) -> int:
    """Commit the removal of the expirable snapshots, required to build on the current snapshot (so an
    export committing meanwhile makes the expiry fail rather than race it; the next run expires them)."""
    from pyiceberg.table.update import AssertRefSnapshotId, RemoveSnapshotsUpdate

    doomed = expirable(table.metadata, options)
    if not doomed:
        return 0
    requirement = AssertRefSnapshotId.model_validate(
        {"snapshot-id": table.metadata.current_snapshot_id, "ref": "main"}
    )
    update = RemoveSnapshotsUpdate.model_validate({"snapshot-ids": doomed})
    from pyiceberg.exceptions import CommitFailedException

    try:
        table.catalog.commit_table(table, (requirement,), (update,))
    except CommitFailedException as exc:
        raise MaintenanceConflict(_conflict(table, exc)) from None
    return len(doomed)


# ---- orphan files ------------------------------------------------------------------------------------


def _path(url: str) -> str:
    """A file's location without its scheme, as a listing names it (``/dir/f`` on file://,
    ``bucket/key`` on object stores)."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return posixpath.normpath(parsed.path)
    return f"{parsed.netloc}{parsed.path}"


def referenced(table: Any) -> set[str]:
    """Every file a snapshot of ``table`` references: manifest lists, manifests, data and delete files,
    statistics files."""
    io, metadata = table.io, table.metadata
    out: set[str] = set()
    for snapshot in metadata.snapshots:
        out.add(_path(snapshot.manifest_list))
        for manifest in snapshot.manifests(io):
            out.add(_path(manifest.manifest_path))
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                out.add(_path(entry.data_file.file_path))
    for stats in [*metadata.statistics, *metadata.partition_statistics]:
        out.add(_path(stats.statistics_path))
    return out


def _walk(store: Any, path: str) -> Iterator[tuple[str, int | None]]:
    yield from store.list_modified(path).items()
    for sub in store.list_subdirs(path):
        yield from _walk(store, sub)


def remove_orphans(table: Any, target: StorageSpec, min_age_ms: int, now_ms: int) -> int:
    """Delete the files under the table's data/ and metadata/ no snapshot references, once old enough."""
    store = target.open()
    if _path(table.metadata.location).rstrip("/") != _path(target.url).rstrip("/"):
        raise ConfigError(f"table is at {table.metadata.location}, not at {target.url}: no orphan removal")
    live = referenced(table)
    doomed = []
    for folder in ("data", "metadata"):
        for key, modified in _walk(store, f"{store.root}/{folder}"):
            name = key.rsplit("/", 1)[-1]
            if folder == "metadata" and (name.endswith(".metadata.json") or name == "version-hint.text"):
                continue  # the commit log of the embedded catalog
            if posixpath.normpath(key) in live or _path(key) in live:
                continue
            if modified is None or now_ms - modified < min_age_ms:
                continue  # maybe a running export's, not committed yet
            doomed.append(key)
    if doomed:
        log.info("deleting %d orphan files of table %s", len(doomed), table.metadata.location)
        store.delete(doomed)
    return len(doomed)


# ---- old metadata files ------------------------------------------------------------------------------

_VERSIONED = re.compile(r"^v(\d+)\.metadata\.json$")
_SEQUENCED = re.compile(r"^(\d+)-.*\.metadata\.json$")


def _metadata_order(name: str) -> tuple[int, str]:
    """Oldest first: ``v<N>`` of the embedded catalog, ``<N>-<uuid>`` of the others."""
    match = _VERSIONED.match(name) or _SEQUENCED.match(name)
    return (int(match[1]) if match else -1, name)


def remove_old_metadata(table: Any, target: StorageSpec, min_age_ms: int, now_ms: int) -> int:
    """Delete the table's ``*.metadata.json`` files that are neither current nor in the current
    metadata's log, once older than ``min_age_ms``, oldest first (step 4 of the module docstring)."""
    from pyiceberg.table import TableProperties
    from pyiceberg.utils.properties import property_as_bool

    metadata = table.metadata
    if not property_as_bool(metadata.properties, TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED, True):
        return 0
    store = target.open()
    if _path(metadata.location).rstrip("/") != _path(target.url).rstrip("/"):
        raise ConfigError(f"table is at {metadata.location}, not at {target.url}: no metadata cleanup")
    keep = {_path(table.metadata_location), *(_path(e.metadata_file) for e in metadata.metadata_log)}
    doomed = []
    for key, modified in store.list_modified(f"{store.root}/metadata").items():
        name = key.rsplit("/", 1)[-1]
        if not name.endswith(".metadata.json") or posixpath.normpath(key) in keep or _path(key) in keep:
            continue
        if modified is None or now_ms - modified < min_age_ms:
            continue
        doomed.append(key)
    doomed.sort(key=lambda k: _metadata_order(k.rsplit("/", 1)[-1]))
    for key in doomed:  # one by one, oldest first: the versions left stay contiguous
        store.delete([key])
    if doomed:
        log.info("deleted %d old metadata files of table %s", len(doomed), metadata.location)
    return len(doomed)
