"""What to delete from one remote partition: expired segments, unfinished deletes and orphans (pure).

Inputs are what one listing and the manifest say; the output is a plan the executor carries out. The
sweep never touches a COPY_FINISHED segment: finished data leaves only through retention (or an explicit
topic deletion), and always by way of DELETE_STARTED -> DELETE_FINISHED.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from storage_core.remote.cover import Cover
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
    expired_offset: int | None = None
    """Where the expired segments end (the last one's next offset, or the next kept segment's base when
    it overlaps them; None when none expires): every offset below it has left the tier by retention.
    Recorded before the deletes (``PartitionState``), so local trim and copy know those offsets expired
    even when the tier is left empty."""
    resume: list[ListedSegment] = field(default_factory=list)
    """Deletes a crash interrupted (DELETE_STARTED, or DELETE_FINISHED with leftovers): finish them."""
    orphans: list[ListedSegment] = field(default_factory=list)
    """COPY_STARTED attempts and marker-less objects older than the grace period."""
    duplicates: list[ListedSegment] = field(default_factory=list)
    """Finished copies serving no offset (cover.py: a retried or concurrent copy, or a new leader's copy
    holding every offset of them); deleted through DELETE_STARTED like any finished segment, never by the
    sweep, and never while their data disagrees with the serving copy."""
    divergent: list[str] = field(default_factory=list)
    """Overlapping copies that disagree (Cover.divergences): kept, reported, and they stop retention."""

    @property
    def empty(self) -> bool:
        return not (self.expire or self.resume or self.orphans or self.duplicates)


def plan_remote_cleanup(
    cover: Cover,
    listed: list[ListedSegment],
    policy: RetentionPolicy,
    now_ms: int,
    *,
    log_start_offset: int | None = None,
    orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS,
) -> RemoteCleanupPlan:
    """``cover`` is the partition's finished segments resolved into served ranges (cover.py);
    ``log_start_offset`` is a logical start below which remote data is deleted (None: no such limit).

    Retention looks at the offsets each segment serves, and deletes a prefix of the serving segments: the
    first kept segment then serves from its own base offset, so an offset still needed is never held only
    by a deleted segment. Segments whose copies disagree (``Cover.divergences``) are never deleted, nor
    anything after them, until an operator resolves the disagreement."""
    plan = RemoteCleanupPlan()
    ranges = cover.ranges
    summaries = [
        SegmentSummary(r.first_offset, r.last_offset + 1, r.segment.max_timestamp, r.segment.size_bytes)
        for r in ranges
    ]
    n_retention = expired_prefix(summaries, policy, now_ms)
    n_start = 0
    if log_start_offset is not None:
        while n_start < len(ranges) and ranges[n_start].last_offset < log_start_offset:
            n_start += 1
        # A segment still serving needed offsets may go too when the next one holds all of them from the
        # log start on (overlapping copies): once it is deleted, the next one serves from its own base.
        while n_start + 1 < len(ranges) and ranges[n_start + 1].segment.base_offset <= log_start_offset:
            n_start += 1
    divergent = cover.divergent_segments()
    n = max(n_retention, n_start)
    held = next((i for i, r in enumerate(ranges[:n]) if r.segment.segment_id in divergent), None)
    if held is not None:
        n = held
    plan.divergent = [d.describe() for d in cover.divergences]
    for i, served in enumerate(ranges[:n]):
        reason = _reason(served.segment, policy, now_ms, i < n_start, log_start_offset)
        plan.expire.append(Deletion(served.segment, reason))
    if n:
        end = ranges[n - 1].segment.next_offset
        if n < len(ranges):  # the next kept segment serves from its own base once these are gone
            end = min(end, ranges[n].segment.base_offset)
        plan.expired_offset = end
    serving = {r.segment.segment_id for r in ranges}
    for seg in listed:
        if seg.state is SegmentState.DELETE_STARTED or (
            seg.state is SegmentState.DELETE_FINISHED and seg.leftovers
        ):
            plan.resume.append(seg)
        elif seg.segment_id in serving or seg.state is SegmentState.DELETE_FINISHED:
            continue
        elif seg.state is SegmentState.COPY_FINISHED:
            if seg.segment_id not in divergent:
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
