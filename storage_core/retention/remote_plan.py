"""What to delete from one remote partition: expired segments, unfinished deletes and orphans (pure).

Inputs are what one listing and the manifest say; the output is a plan the executor carries out. The
sweep never touches a COPY_FINISHED segment: finished data leaves only through retention (or an explicit
topic deletion), and always by way of DELETE_STARTED -> DELETE_FINISHED.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from storage_core.remote.layout import SegmentState
from storage_core.remote.metadata import SegmentMetadata
from storage_core.retention.policy import RetentionPolicy, SegmentSummary, expired_prefix

DEFAULT_ORPHAN_GRACE_MS = 6 * 3600 * 1000


@dataclass(frozen=True)
class ListedSegment:
    """One segment id as a listing shows it (state from marker names, newest object time)."""

    base_offset: int
    segment_id: uuid.UUID
    state: SegmentState | None
    modified_ms: int | None
    leftovers: bool = False
    """A DELETE_FINISHED segment that still has data objects or older markers (a crash while tidying)."""


@dataclass(frozen=True)
class Deletion:
    segment: SegmentMetadata
    reason: str


@dataclass
class RemoteCleanupPlan:
    expire: list[Deletion] = field(default_factory=list)
    """Finished segments to delete, oldest first (retention or the log start offset)."""
    resume: list[ListedSegment] = field(default_factory=list)
    """Deletes a crash interrupted (DELETE_STARTED, or DELETE_FINISHED with leftovers): finish them."""
    orphans: list[ListedSegment] = field(default_factory=list)
    """COPY_STARTED attempts and marker-less objects older than the grace period."""
    duplicates: list[ListedSegment] = field(default_factory=list)
    """Finished copies shadowed by another finished copy of the same data (a retried or concurrent
    copy); deleted through DELETE_STARTED like any finished segment, never by the sweep."""

    @property
    def empty(self) -> bool:
        return not (self.expire or self.resume or self.orphans or self.duplicates)


def plan_remote_cleanup(
    finished: list[SegmentMetadata],
    listed: list[ListedSegment],
    policy: RetentionPolicy,
    now_ms: int,
    *,
    log_start_offset: int | None = None,
    orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS,
) -> RemoteCleanupPlan:
    """``finished`` are the readable segments in offset order (the manifest); ``log_start_offset`` is a
    logical start below which remote data is deleted (None: no such limit)."""
    plan = RemoteCleanupPlan()
    summaries = [
        SegmentSummary(m.base_offset, m.end_offset + 1, m.max_timestamp, m.size_bytes) for m in finished
    ]
    n_retention = expired_prefix(summaries, policy, now_ms)
    n_start = 0
    if log_start_offset is not None:
        while n_start < len(finished) and finished[n_start].end_offset < log_start_offset:
            n_start += 1
    for i, meta in enumerate(finished[: max(n_retention, n_start)]):
        reason = _reason(meta, policy, now_ms, i < n_start, log_start_offset)
        plan.expire.append(Deletion(meta, reason))
    readable = {m.segment_id for m in finished}
    for seg in listed:
        if seg.state is SegmentState.DELETE_STARTED or (
            seg.state is SegmentState.DELETE_FINISHED and seg.leftovers
        ):
            plan.resume.append(seg)
        elif seg.segment_id in readable or seg.state is SegmentState.DELETE_FINISHED:
            continue
        elif seg.state is SegmentState.COPY_FINISHED:
            plan.duplicates.append(seg)
        elif (
            seg.state in (SegmentState.COPY_STARTED, None)
            and seg.modified_ms is not None
            and seg.modified_ms < now_ms - orphan_grace_ms
        ):
            plan.orphans.append(seg)
    return plan


def _reason(
    meta: SegmentMetadata,
    policy: RetentionPolicy,
    now_ms: int,
    below_start: bool,
    log_start_offset: int | None,
) -> str:
    if below_start:
        return f"below the log start offset {log_start_offset}"
    if policy.retention_ms != -1 and meta.max_timestamp < now_ms - policy.retention_ms:
        return f"older than remote retention {policy.retention_ms} ms"
    return f"over remote retention {policy.retention_bytes} bytes"
