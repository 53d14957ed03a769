"""How far the broker's local log may be trimmed (pure): the local retention window, never past what
is safely tiered.

The target is the start of the local window computed over the tiered segments (time: largest timestamp;
size: the local bytes from the oldest tiered segment on), capped at the highest COPY_FINISHED offset + 1,
and at the first offset from the log start on that no readable segment holds (a hole, e.g. a segment in
quarantine, retention/quarantine.py): the broker's copy of those offsets may be the only good one.
Local deletion therefore can never run ahead of tiering. The one exception is what remote retention
expired (``PartitionState.retention_expired_offset``, recorded by cleanup before it deletes): those
offsets were tiered and are past the topic's total retention, so they leave the broker even when the
tier is now empty or the window keeps every tiered segment (KIP-405 moves the log start up to the remote
start for the same reason), unless a quarantined segment holds some of them. A tier that merely begins
above the log start proves nothing: without the record, offsets below it stay.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage_core.remote.metadata import SegmentMetadata
from storage_core.retention.policy import RetentionPolicy, SegmentSummary, expired_prefix


def plan_local_trim(
    finished: Sequence[SegmentMetadata],
    log_start_offset: int,
    policy: RetentionPolicy,
    now_ms: int,
    *,
    untiered_local_bytes: int = 0,
    quarantined: Sequence[SegmentMetadata] = (),
    expired_offset: int | None = None,
) -> int | None:
    """Offset to DeleteRecords to, or None when nothing should be trimmed.

    ``finished`` are the readable remote segments in offset order; ``log_start_offset`` is the
    partition's current log start; ``untiered_local_bytes`` counts local data above the tiered range
    toward the size limit (0 when unknown, which only ever trims less); ``quarantined`` are the
    partition's segments in quarantine, whose offsets the trim never passes; ``expired_offset`` is
    the partition state's ``retention_expired_offset`` (None: remote retention never expired anything).
    """
    if policy.retention_ms == -1 and policy.retention_bytes == -1:
        return None  # no local window: Kafka's own retention deletes locally, never this trim
    expired = expired_floor(log_start_offset, expired_offset, quarantined)
    untrimmed = expired if expired > log_start_offset else None
    local = [m for m in finished if m.end_offset >= log_start_offset]
    if not local:
        return untrimmed
    summaries = [
        SegmentSummary(m.base_offset, m.end_offset + 1, m.max_timestamp, m.size_bytes) for m in local
    ]
    if policy.retention_bytes != -1:
        # The untiered tail counts toward the local size but can never be trimmed: model it as one
        # extra, never-expiring segment after the tiered ones.
        summaries.append(
            SegmentSummary(summaries[-1].next_offset, summaries[-1].next_offset, 2**62, untiered_local_bytes)
        )
        n = expired_prefix(summaries, policy, now_ms, keep_last=1)
    else:
        n = expired_prefix(summaries, policy, now_ms)
    if n == 0:
        return untrimmed
    target = min(
        local[n - 1].end_offset + 1,
        finished[-1].end_offset + 1,
        _held_until(finished, expired, quarantined),
    )
    target = max(target, expired)  # what retention expired goes whatever the window says
    return target if target > log_start_offset else None


def expired_floor(
    log_start_offset: int, expired_offset: int | None, quarantined: Sequence[SegmentMetadata]
) -> int:
    """Where the log start may go without the window: up to what remote retention expired, but never into
    a quarantined segment (the broker's copy of its offsets may be the only good one)."""
    if expired_offset is None or expired_offset <= log_start_offset:
        return log_start_offset
    holding = [q.base_offset for q in quarantined if q.next_offset > log_start_offset]
    return max(log_start_offset, min([expired_offset, *holding]))


def _held_until(
    finished: Sequence[SegmentMetadata], floor: int, quarantined: Sequence[SegmentMetadata]
) -> int:
    """The first offset >= ``floor`` in no readable segment (offsets between a segment's last offset and
    the next segment's base never existed on the broker, so they are no hole); ``floor`` is the log
    start, or what remote retention expired above it."""
    held = floor
    for m in finished:
        if m.next_offset <= held:
            continue
        if m.base_offset > held:
            break
        held = m.next_offset
    for q in quarantined:
        if q.next_offset > floor:
            held = min(held, q.base_offset)
    return max(held, floor)
