"""How far the broker's local log may be trimmed (pure): the local retention window, never past what
is safely tiered.

The target is the start of the local window computed over the tiered segments (time: largest timestamp;
size: the local bytes from the oldest tiered segment on), capped at the highest COPY_FINISHED offset + 1,
and at the first offset from the log start on that no readable segment holds (a hole, e.g. a segment in
quarantine, retention/quarantine.py): the broker's copy of those offsets may be the only good one.
Local deletion therefore can never run ahead of tiering. Offsets below the first readable segment are no
hole below any quarantined segment: remote retention expired them, they are past the topic's
total retention (KIP-405 moves the log start up to the remote start for the same reason).
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
) -> int | None:
    """Offset to DeleteRecords to, or None when nothing should be trimmed.

    ``finished`` are the readable remote segments in offset order; ``log_start_offset`` is the
    partition's current log start; ``untiered_local_bytes`` counts local data above the tiered range
    toward the size limit (0 when unknown, which only ever trims less); ``quarantined`` are the
    partition's segments in quarantine, whose offsets the trim never passes.
    """
    if policy.retention_ms == -1 and policy.retention_bytes == -1:
        return None  # no local window: Kafka's own retention deletes locally, never this trim
    expired = _expired_below(finished, log_start_offset, quarantined)
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
        _held_until(finished, log_start_offset, quarantined),
    )
    return target if target > log_start_offset else None


def _expired_below(
    finished: Sequence[SegmentMetadata], log_start_offset: int, quarantined: Sequence[SegmentMetadata]
) -> int:
    """The remote start, when the log start lies below it: remote retention expired those offsets, so
    they leave the broker even when the window keeps every tiered segment (otherwise the broker would
    keep, and readers see, history past the total retention); a quarantined segment holding some of
    them caps it at its base."""
    if not finished or finished[0].base_offset <= log_start_offset:
        return log_start_offset
    holding = [q.base_offset for q in quarantined if q.next_offset > log_start_offset]
    return max(log_start_offset, min([finished[0].base_offset, *holding]))


def _held_until(
    finished: Sequence[SegmentMetadata], log_start_offset: int, quarantined: Sequence[SegmentMetadata]
) -> int:
    """The first offset >= ``log_start_offset`` in no readable segment (offsets between a segment's last
    offset and the next segment's base never existed on the broker, so they are no hole; nor are offsets
    below the first readable segment and below every quarantined one)."""
    held = log_start_offset
    holding = [q for q in quarantined if q.next_offset > log_start_offset]
    if finished and finished[0].base_offset > held:
        held = max(held, min([finished[0].base_offset, *(q.base_offset for q in holding)]))
    for m in finished:
        if m.next_offset <= held:
            continue
        if m.base_offset > held:
            break
        held = m.next_offset
    for q in holding:
        held = min(held, max(q.base_offset, log_start_offset))
    return held
