"""Carry out a remote cleanup plan for one partition, crash-safely and idempotently.

A finished segment is deleted in this order: the partition state's ``retention_expired_offset`` raised
past it (once per run, for those retention expires) -> DELETE_STARTED marker -> dropped from the
manifest -> data objects deleted -> DELETE_FINISHED marker -> older markers removed. A crash anywhere
leaves the segment in DELETE_STARTED (unreadable), and the next run finishes it (a crash before the
first marker leaves it finished and readable). Orphans lose their data first and their marker last, so
an interrupted sweep is simply swept again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from storage_core.faults import fault_point
from storage_core.remote.catalog import PartitionCatalog, PartitionListing, SegmentListing
from storage_core.remote.layout import SegmentState
from storage_core.remote.metadata import Manifest, SegmentMetadata
from storage_core.retention.policy import RetentionPolicy
from storage_core.retention.remote_plan import (
    DEFAULT_ORPHAN_GRACE_MS,
    ListedSegment,
    RemoteCleanupPlan,
    plan_remote_cleanup,
)


@dataclass
class PartitionCleanupResult:
    topic: str
    partition: int
    deleted: list[dict[str, object]] = field(default_factory=list)
    resumed: int = 0
    orphans_removed: int = 0
    duplicates_removed: int = 0
    divergent: list[str] = field(default_factory=list)
    """Overlapping copies that disagree: kept and reported (they stop retention until resolved)."""
    bytes_deleted: int = 0
    remote_start_offset: int | None = None
    dry_run: bool = False


def _now_ms() -> int:
    return int(time.time() * 1000)


def listed_segments(catalog: PartitionCatalog, listing: PartitionListing) -> list[ListedSegment]:
    modified = catalog.store.list_modified(catalog.layout.partition_dir(catalog.tp))
    out = []
    for entry in listing.segments.values():
        data, markers = catalog.segment_keys(entry)
        times = [t for k in data + markers if (t := modified.get(k)) is not None]
        leftovers = entry.state is SegmentState.DELETE_FINISHED and (
            bool(entry.objects) or len(entry.states) > 1
        )
        out.append(
            ListedSegment(
                entry.base_offset, entry.segment_id, entry.state, max(times) if times else None, leftovers
            )
        )
    return out


def cleanup_partition(
    catalog: PartitionCatalog,
    policy: RetentionPolicy,
    *,
    now_ms: int | None = None,
    log_start_offset: int | None = None,
    orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS,
    dry_run: bool = False,
) -> PartitionCleanupResult:
    now_ms = _now_ms() if now_ms is None else now_ms
    listing = catalog.listing()
    manifest = catalog.rebuild_manifest(listing, write=False)
    plan = plan_remote_cleanup(
        manifest.cover(),
        listed_segments(catalog, listing),
        policy,
        now_ms,
        log_start_offset=log_start_offset,
        orphan_grace_ms=orphan_grace_ms,
    )
    result = PartitionCleanupResult(catalog.tp.topic, catalog.tp.partition, dry_run=dry_run)
    for d in plan.expire:
        result.deleted.append(
            {
                "base_offset": d.segment.base_offset,
                "end_offset": d.segment.end_offset,
                "segment_id": str(d.segment.segment_id),
                "bytes": d.segment.size_bytes,
                "reason": d.reason,
            }
        )
    result.resumed, result.orphans_removed = len(plan.resume), len(plan.orphans)
    result.duplicates_removed, result.divergent = len(plan.duplicates), plan.divergent
    gone = {d.segment.segment_id for d in plan.expire} | {d.segment_id for d in plan.duplicates}
    remaining = Manifest.of(catalog.tp, [m for m in manifest.finished() if m.segment_id not in gone])
    result.remote_start_offset = remaining.start_offset
    if not dry_run:
        result.bytes_deleted = _execute(catalog, listing, plan, manifest.finished(), now_ms)
    return result


def _execute(
    catalog: PartitionCatalog,
    listing: PartitionListing,
    plan: RemoteCleanupPlan,
    finished: list[SegmentMetadata],
    now_ms: int,
) -> int:
    if plan.expired_offset is not None:
        # Before any delete: a crash after it leaves the segments in the tier, so trimming the broker
        # below it or not copying them again loses nothing either way.
        state = catalog.read_state()
        if plan.expired_offset > (state.retention_expired_offset or 0):
            catalog.write_state(state.model_copy(update={"retention_expired_offset": plan.expired_offset}))
    to_delete = [d.segment for d in plan.expire]
    for seg in plan.duplicates:
        to_delete.append(catalog.read_marker(seg.base_offset, seg.segment_id, SegmentState.COPY_FINISHED))
    for meta in to_delete:
        catalog.write_marker(meta.with_state(SegmentState.DELETE_STARTED, now_ms))
    if to_delete:
        fault_point("cleanup.delete.started")
        gone = {m.segment_id for m in to_delete}
        manifest = Manifest.of(catalog.tp, [m for m in finished if m.segment_id not in gone])
        catalog.store.put_atomic(catalog.layout.manifest_key(catalog.tp), manifest.model_dump_json().encode())
    deleted = 0
    for meta in to_delete:
        deleted += _finish_delete(catalog, listing.segments[meta.segment_id], meta, now_ms)
    for seg in plan.resume:
        assert seg.state is not None
        meta = catalog.read_marker(seg.base_offset, seg.segment_id, seg.state)
        deleted += _finish_delete(catalog, listing.segments[seg.segment_id], meta, now_ms)
    for seg in plan.orphans:
        entry = listing.segments[seg.segment_id]
        data, markers = catalog.segment_keys(entry)
        catalog.store.delete(data)
        catalog.store.delete(markers)
        deleted += sum(entry.objects.values())
    return deleted


def _finish_delete(
    catalog: PartitionCatalog, entry: SegmentListing, meta: SegmentMetadata, now_ms: int
) -> int:
    data, _ = catalog.segment_keys(entry)
    catalog.store.delete(data)
    fault_point("cleanup.segment.data_deleted")
    if meta.state is not SegmentState.DELETE_FINISHED:
        catalog.write_marker(meta.with_state(SegmentState.DELETE_FINISHED, now_ms))
    fault_point("cleanup.segment.deleted")
    older = [
        catalog.layout.marker_key(catalog.tp, meta.base_offset, meta.segment_id, s)
        for s in (SegmentState.COPY_STARTED, SegmentState.COPY_FINISHED, SegmentState.DELETE_STARTED)
    ]
    catalog.store.delete(older)
    return sum(entry.objects.values())


def delete_partition_tier(catalog: PartitionCatalog, *, now_ms: int | None = None) -> int:
    """Delete everything of one remote partition (a topic's tier being removed); idempotent."""
    now_ms = _now_ms() if now_ms is None else now_ms
    listing = catalog.listing()
    finished = catalog.rebuild_manifest(listing, write=False).finished()
    for meta in finished:
        catalog.write_marker(meta.with_state(SegmentState.DELETE_STARTED, now_ms))
    catalog.store.delete([catalog.layout.manifest_key(catalog.tp)])
    deleted = 0
    for entry in listing.segments.values():
        data, markers = catalog.segment_keys(entry)
        catalog.store.delete(data)
        deleted += sum(entry.objects.values())
    # Markers last: until they are gone, a crashed run is resumed from them.
    for entry in catalog.listing().segments.values():
        catalog.store.delete(catalog.segment_keys(entry)[1])
    catalog.store.delete([catalog.layout.partition_state_key(catalog.tp)])
    return deleted
