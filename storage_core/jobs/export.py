"""``tierkeeper export``: the remote tier of a topic as Parquet, partitioned by partition and date, as a
Spark job whose tasks are scan splits (layout, state and the exactly-once rule: spark/export_plan.py).

A run: read the state from the target -> delete what an unfinished run left (files at or past each
partition's committed offset) -> plan splits from the committed offsets to the remote tier's end ->
run them in waves of ``splits_per_commit``, in offset order per partition, rewriting the state after
each wave. A second run exports only what was tiered since; a killed run resumes from the last wave.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage_core.errors import ConfigError, RemoteObjectNotFound, TierkeeperError
from storage_core.remote.reader import ReadOptions, RemoteReader
from storage_core.remote.scan_plan import DEFAULT_SPLIT_BYTES, PartitionWindow, ScanSplit, plan_partition
from storage_core.spark.export_plan import ExportState, partition_of_dir, state_key, uncommitted
from storage_core.spark.export_task import ExportTask, export_split
from storage_core.spark.options import ScanOptions, StorageSpec
from storage_core.spark.windows import topic_partitions

DEFAULT_SPLITS_PER_COMMIT = 64


@dataclass(frozen=True)
class ExportSummary:
    topic: str
    records: int
    files_removed: int
    splits: int
    next_offsets: dict[int, int]


def _read_state(target: Any, topic: str, topic_id: str) -> ExportState:
    try:
        raw = target.get(state_key(target.root))
    except RemoteObjectNotFound:
        return ExportState(topic=topic, topic_id=topic_id)
    state = ExportState.model_validate_json(raw)
    if (state.topic, state.topic_id) != (topic, topic_id):
        raise ConfigError(
            f"the export target holds topic {state.topic} ({state.topic_id}), not {topic} ({topic_id}); "
            "export each topic (incarnation) to its own target"
        )
    return state


def _remove_uncommitted(target: Any, state: ExportState) -> int:
    """Delete what an unfinished run left; returns how many files."""
    doomed: list[str] = []
    for pdir in target.list_subdirs(target.root):
        partition = partition_of_dir(pdir)
        if partition is None:
            continue
        committed = state.next_offsets.get(partition, 0)
        for ddir in target.list_subdirs(pdir):
            doomed += [key for key, _ in target.list_dir(ddir) if uncommitted(key, committed)]
    target.delete(doomed)
    return len(doomed)


def plan_splits(reader: RemoteReader, opts: ScanOptions, next_offsets: dict[int, int]) -> list[ScanSplit]:
    """Splits from each partition's committed offset (its first tiered one when none) to the tier's end,
    in offset order per partition."""
    splits: list[ScanSplit] = []
    for tp in topic_partitions(reader, opts):
        manifest = reader.manifest(tp, refresh=True)
        if manifest.start_offset is None or manifest.end_offset is None:
            continue
        start = max(next_offsets.get(tp.partition, manifest.start_offset), manifest.start_offset)
        window = PartitionWindow(tp, start, manifest.end_offset + 1)
        if window.start < window.end:
            splits += plan_partition(reader, manifest, window, max_split_bytes=opts.max_split_bytes)
    return sorted(splits, key=lambda s: (s.partition, s.start_offset))


@dataclass(frozen=True)
class Guarded:
    """Runs one split's task on an executor and returns the project's errors instead of raising them (a
    raised one reaches the driver as Spark's exception, its message a Python traceback)."""

    task: Callable[[Any], Any]

    def __call__(self, job: Any) -> Any:
        try:
            return self.task(job)
        except TierkeeperError as exc:
            return exc


def run_export(
    spark: Any,
    source: StorageSpec,
    target: StorageSpec,
    opts: ScanOptions,
    *,
    splits_per_commit: int = DEFAULT_SPLITS_PER_COMMIT,
    task: Callable[[ExportTask], tuple[int, int, int, int]] = export_split,
) -> ExportSummary:
    """Export what is tiered and not yet exported. ``task`` runs one split on an executor (tests hand in
    one that fails at a chosen split, to stop a run at a known point)."""
    store = target.open()
    with RemoteReader(source.open(), ReadOptions(isolation=opts.isolation)) as reader:
        tp0 = reader.resolve(opts.topic, 0, opts.topic_id)
        state = _read_state(store, tp0.topic, tp0.topic_id)
        removed = _remove_uncommitted(store, state)
        splits = plan_splits(reader, opts, state.next_offsets)
    records = 0
    next_offsets = dict(state.next_offsets)
    for i in range(0, len(splits), splits_per_commit):
        wave = [ExportTask(source, target, opts.isolation, s) for s in splits[i : i + splits_per_commit]]
        outcomes = spark.sparkContext.parallelize(wave, len(wave)).map(Guarded(task)).collect()
        failed = [o for o in outcomes if isinstance(o, TierkeeperError)]
        if failed:
            # Our own error (damaged data, an unreachable store) is one line on the driver, not a task's
            # traceback wrapped in Spark's; nothing of this wave is committed, so a rerun redoes it.
            raise failed[0]
        results = [o for o in outcomes if not isinstance(o, TierkeeperError)]
        for partition, _first, end, rows in results:
            records += rows
            next_offsets[partition] = max(next_offsets.get(partition, 0), end)
        # Every split of this wave is stored: commit. Waves go in offset order per partition, so the
        # committed offsets never pass a split that is not stored.
        state = ExportState(topic=state.topic, topic_id=state.topic_id, next_offsets=next_offsets)
        store.put_atomic(state_key(store.root), state.model_dump_json().encode())
    return ExportSummary(opts.topic, records, removed, len(splits), next_offsets)


__all__ = ["DEFAULT_SPLIT_BYTES", "ExportSummary", "run_export"]
