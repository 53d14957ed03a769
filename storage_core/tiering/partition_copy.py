"""Copy everything eligible of one partition: plan from the log dir and the remote manifest, then copy
oldest first, publishing each finished segment in the manifest before starting the next."""

from __future__ import annotations

from dataclasses import dataclass, field

from storage_core.errors import ConfigError, TierkeeperError
from storage_core.formats.segment_files import TopicPartition
from storage_core.logdir import LogDir
from storage_core.remote.catalog import PartitionCatalog
from storage_core.remote.layout import RemoteLayout, TopicPartitionId
from storage_core.remote.metadata import readable_segments
from storage_core.remote.store_api import ObjectStore
from storage_core.tiering.copy import Progress, SegmentCopier
from storage_core.tiering.plan import CopyTask, plan_copies


@dataclass
class PartitionCopyResult:
    topic: str
    partition: int
    copied_segments: int = 0
    copied_bytes: int = 0
    already_tiered: int = 0
    held_back: int = 0
    remote_end_offset: int | None = None
    error: str | None = None
    copied_bases: list[int] = field(default_factory=list)


def copy_partition(task: CopyTask, store: ObjectStore, progress: Progress | None = None) -> PartitionCopyResult:
    """Run ``task``; errors of this partition are returned in the result, never raised, so a bad
    partition does not stop the others."""
    result = PartitionCopyResult(task.topic, task.partition)
    try:
        _copy(task, store, result, progress)
    except TierkeeperError as exc:
        result.error = str(exc)
    return result


def _copy(task: CopyTask, store: ObjectStore, result: PartitionCopyResult, progress: Progress | None) -> None:
    log_dir = LogDir(task.log_dir)
    wanted = TopicPartition(task.topic, task.partition)
    pdir = next((p for p in log_dir.partitions({task.topic}) if p.tp == wanted), None)
    if pdir is None:
        raise ConfigError(f"{wanted}: no partition directory in {task.log_dir}")
    tp = TopicPartitionId(task.topic, pdir.topic_id_string(), task.partition)
    catalog = PartitionCatalog(store, RemoteLayout(store.root), tp)
    manifest = catalog.rebuild_manifest()
    stable = task.last_stable_offset if task.last_stable_offset is not None else task.high_watermark
    if stable is None:
        raise ConfigError(f"{wanted}: neither a last stable offset (--bootstrap-servers) nor a checkpointed "
                          "high watermark is known, so no segment can be proven safe to copy")
    segments = pdir.segments()
    remote_next = manifest.segments[-1].next_offset if manifest.segments else None
    decision = plan_copies([s.base_offset for s in segments], stable, remote_next)
    result.already_tiered, result.held_back = decision.skipped_tiered, decision.held_back
    copier = SegmentCopier(
        catalog, pdir, lso_known=task.last_stable_offset is not None, leader_epochs=pdir.leader_epochs(),
        aborted=pdir.aborted_transactions(), broker_id=task.broker_id,
        index_entry_bytes=task.index_entry_bytes, progress=progress,
    )
    finished = list(manifest.segments)
    for span in decision.eligible:
        done = copier.copy(span)
        finished.append(done.metadata)
        manifest = manifest.model_copy(update={"segments": readable_segments(finished)})
        store.put_atomic(catalog.layout.manifest_key(tp), manifest.model_dump_json().encode())
        result.copied_segments += 1
        result.copied_bytes += done.bytes_copied
        result.copied_bases.append(span.base_offset)
    result.remote_end_offset = manifest.end_offset
