"""Which local segments to copy: KIP-405 copy eligibility as a pure function.

A segment may be copied when it is not the active segment and everything in it is below the last stable
offset: its successor's base offset (one past its last offset) is <= LSO. Segments already held remotely
are skipped; the rest go oldest first, and copying stops at the first segment that is not eligible so the
remote tier never has a hole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


class SegmentSpan(NamedTuple):
    """A local segment as the planner sees it: [base_offset, next_offset) with next = successor's base."""

    base_offset: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class CopyDecision:
    eligible: list[SegmentSpan]
    skipped_tiered: int
    """Segments the remote tier already holds."""
    held_back: int
    """Rolled segments not yet below the last stable offset (an open transaction or unreplicated data)."""


def plan_copies(
    base_offsets: list[int], last_stable_offset: int, remote_next_offset: int | None
) -> CopyDecision:
    """Decide what to copy from a partition whose segments start at ``base_offsets``.

    ``remote_next_offset`` is one past the last offset already tiered (None when nothing is).
    The last base offset is the active segment and is never copied.
    """
    ordered = sorted(base_offsets)
    eligible: list[SegmentSpan] = []
    skipped = held = 0
    for base, successor in zip(ordered, ordered[1:]):
        if remote_next_offset is not None and successor <= remote_next_offset:
            skipped += 1
            continue
        if successor > last_stable_offset:
            # Successors only grow, so every later segment is held back too: no gap can open.
            held += 1
            continue
        eligible.append(SegmentSpan(base, successor))
    return CopyDecision(eligible, skipped, held)


@dataclass(frozen=True)
class CopyTask:
    """One partition's copy work, small and picklable so a Spark task or a thread can run it."""

    log_dir: str
    topic: str
    partition: int
    remote_url: str
    """Root of the remote tier, prefix included (``s3://bucket/some/prefix``)."""
    storage_options: dict[str, Any] = field(repr=False)
    """May hold credentials: left out of the repr, so a logged or failed task never shows them."""
    last_stable_offset: int | None
    """From the broker's Admin API (read_committed latest offset); None when no broker was given."""
    high_watermark: int | None
    """The checkpointed high watermark, used only when the LSO is unknown and no transactions exist."""
    broker_id: int | None = None
    index_entry_bytes: int = 1 << 20
    segments_in_flight: int | None = None
    """Segments of this partition stored at once; None: the store decides (``segments_in_flight``)."""
    topic_configs: dict[str, str] | None = None
    """The topic's configs from Kafka (DescribeConfigs); the copy refuses a topic they show cannot be
    tiered (``tiering.eligibility``). None: not checked here, the caller vouches (``--assume-tierable``);
    the log cleaner's checkpoint in the log dir is still checked."""
