"""Retention policies as pure functions over segment summaries.

Two retentions, as in KIP-405 and the Uber design: the remote tier keeps data for the topic's (remote)
retention; the broker keeps only a local window. Both are "by time" (a segment expires when its largest
timestamp is older than the limit) and "by size" (the oldest segments go until the total fits). -1 means
unlimited, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field, model_validator

UNLIMITED = -1


class RetentionPolicy(BaseModel):
    """Limits for one tier. ``-1`` disables a limit."""

    retention_ms: int = Field(default=UNLIMITED, ge=-1)
    retention_bytes: int = Field(default=UNLIMITED, ge=-1)


class TopicRetention(BaseModel):
    """A topic's two retentions: the remote tier's and the broker-local window."""

    remote: RetentionPolicy = Field(default_factory=RetentionPolicy)
    local: RetentionPolicy = Field(default_factory=RetentionPolicy)

    @model_validator(mode="after")
    def _local_within_remote(self) -> TopicRetention:
        for field in ("retention_ms", "retention_bytes"):
            local, remote = getattr(self.local, field), getattr(self.remote, field)
            if remote != UNLIMITED and (local == UNLIMITED or local > remote):
                raise ValueError(f"local {field} ({local}) must not exceed remote {field} ({remote})")
        return self


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What retention looks at: the offset range, the largest timestamp and the size of a segment."""

    base_offset: int
    next_offset: int
    max_timestamp: int
    size_bytes: int


def expired_prefix(
    segments: Sequence[SegmentSummary], policy: RetentionPolicy, now_ms: int, *, keep_last: int = 0
) -> int:
    """How many of the oldest ``segments`` (offset order) fall outside ``policy``.

    Deletion is always a prefix, so what remains stays contiguous. ``keep_last`` protects the newest
    segments (the local tier never deletes its active segment).
    """
    limit = max(0, len(segments) - keep_last)
    count = 0
    if policy.retention_ms != UNLIMITED:
        while count < limit and segments[count].max_timestamp < now_ms - policy.retention_ms:
            count += 1
    if policy.retention_bytes != UNLIMITED:
        total = sum(s.size_bytes for s in segments[count:])
        while count < limit and total > policy.retention_bytes:
            total -= segments[count].size_bytes
            count += 1
    return count


def window_start(
    segments: Sequence[SegmentSummary], policy: RetentionPolicy, now_ms: int, *, keep_last: int = 0
) -> int | None:
    """First offset still inside ``policy``'s window: the next offset of the last expired segment, or
    None when nothing expires."""
    n = expired_prefix(segments, policy, now_ms, keep_last=keep_last)
    return segments[n - 1].next_offset if n else None
