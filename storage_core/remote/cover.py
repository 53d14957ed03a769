"""Which stored segment serves each offset of a partition: the one rule for overlapping remote segments.

Copy tiers whole broker segments, so every `.log` object stays byte-identical to a broker file. Replicas
hold the same batches (a follower appends the leader's batches as they are) but roll their segments at
different offsets, so once leadership moves, the new leader's oldest untiered segment usually starts
below the tiered end: the remote tier then holds two segments for the same offsets. Overlaps are allowed
and resolved here, once, for every reader (RemoteReader, retention, rebuild, ``ls``, Spark):

- Each offset is served by the finished segment holding it with the lowest base offset; among segments
  with the same base offset, the one whose COPY_FINISHED came first (then the lower segment id).
- So the cover is a chain of ranges in offset order: a segment serves from its base offset, or from one
  past the previous range's last offset when an earlier segment holds the start of it, to its own end. A
  segment whose every offset an earlier one serves is *shadowed* and serves nothing.
- Overlapping copies must hold the same data. The metadata check is the leader epochs: over the offsets
  two segments share, their leader-epoch lineages must agree (after an unclean election they do not).
  A disagreement is reported as a Divergence: readers stop before its first offset, cleanup deletes
  neither side, rebuild refuses the partition.
  A segment without recorded epochs cannot be checked and is trusted, as before overlaps were resolved.
  The readers also check that the later segment has a batch starting exactly where its range starts: a
  batch straddling that offset would mean the two logs were not copies of each other.

Pure: functions over SegmentMetadata, no I/O.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from storage_core.errors import DivergentDataError
from storage_core.remote.layout import SegmentState

if TYPE_CHECKING:
    from storage_core.remote.metadata import SegmentMetadata


@dataclass(frozen=True, slots=True)
class ServedRange:
    """Offsets ``first_offset``..``last_offset`` (inclusive) are served from ``segment``."""

    segment: SegmentMetadata
    first_offset: int
    last_offset: int

    @property
    def whole(self) -> bool:
        """True when the range starts at the segment's base offset (nothing of it is skipped)."""
        return self.first_offset == self.segment.base_offset


@dataclass(frozen=True, slots=True)
class Divergence:
    """Two finished segments disagree (leader-epoch lineage) on the offsets they both hold."""

    first_offset: int
    last_offset: int
    served: uuid.UUID
    """The segment the rule would serve these offsets from."""
    other: uuid.UUID
    served_epochs: tuple[tuple[int, int], ...]
    other_epochs: tuple[tuple[int, int], ...]

    def refusal(self, what: str, topic: str, partition: int) -> DivergentDataError:
        """The error of a reader that stops before these offsets."""
        return DivergentDataError(
            f"refusing to serve {what}: {self.describe()}",
            topic=topic,
            partition=partition,
            offset=self.first_offset,
        )

    def describe(self) -> str:
        return (
            f"segments {self.served} and {self.other} hold different data for offsets "
            f"{self.first_offset}..{self.last_offset} (leader epochs {list(self.served_epochs)} vs "
            f"{list(self.other_epochs)}: an unclean leader election?)"
        )


@dataclass(frozen=True)
class Cover:
    """A partition's finished segments resolved into non-overlapping served ranges, in offset order."""

    ranges: tuple[ServedRange, ...]
    shadowed: tuple[SegmentMetadata, ...]
    """Finished segments that serve no offset (every offset of theirs is served by another one)."""
    divergences: tuple[Divergence, ...]

    @property
    def start_offset(self) -> int | None:
        return self.ranges[0].first_offset if self.ranges else None

    @property
    def end_offset(self) -> int | None:
        """Last offset held remotely (inclusive), or None when nothing is."""
        return self.ranges[-1].last_offset if self.ranges else None

    @property
    def next_offset(self) -> int | None:
        """One past the last tiered offset: where the next copy continues (None when nothing is tiered)."""
        nexts = [r.segment.next_offset for r in self.ranges] + [s.next_offset for s in self.shadowed]
        return max(nexts) if nexts else None

    @property
    def segments(self) -> list[SegmentMetadata]:
        """The serving segments, in offset order."""
        return [r.segment for r in self.ranges]

    def index_for_offset(self, offset: int) -> int | None:
        """Index of the first range whose last offset is >= ``offset``, else None."""
        i = bisect.bisect_left([r.last_offset for r in self.ranges], offset)
        return i if i < len(self.ranges) else None

    def divergence_in(self, first: int, last: int) -> Divergence | None:
        """The first divergence touching offsets ``first``..``last``, if any."""
        for d in self.divergences:
            if d.first_offset <= last and d.last_offset >= first:
                return d
        return None

    def divergent_segments(self) -> set[uuid.UUID]:
        return {i for d in self.divergences for i in (d.served, d.other)}


def cover_order(segment: SegmentMetadata) -> tuple[int, int, str]:
    """The rule's precedence: lowest base offset, then earliest COPY_FINISHED, then segment id."""
    return (segment.base_offset, segment.event_time_ms, str(segment.segment_id))


def resolve_cover(segments: Iterable[SegmentMetadata]) -> Cover:
    """Resolve a partition's segments (any order; only COPY_FINISHED ones count) into its Cover."""
    finished = sorted((s for s in segments if s.state is SegmentState.COPY_FINISHED), key=cover_order)
    ranges: list[ServedRange] = []
    shadowed: list[SegmentMetadata] = []
    for seg in finished:
        served_end = ranges[-1].last_offset if ranges else None
        if seg.end_offset < seg.base_offset or (served_end is not None and seg.end_offset <= served_end):
            shadowed.append(seg)  # empty, or every offset of it is already served
            continue
        first = seg.base_offset if served_end is None else max(seg.base_offset, served_end + 1)
        ranges.append(ServedRange(seg, first, seg.end_offset))
    return Cover(tuple(ranges), tuple(shadowed), tuple(_divergences(finished, ranges)))


def _divergences(finished: Sequence[SegmentMetadata], ranges: Sequence[ServedRange]) -> list[Divergence]:
    """Every segment against the ranges that serve offsets it also holds (usually one or two)."""
    out: list[Divergence] = []
    lasts = [r.last_offset for r in ranges]
    for seg in finished:
        if seg.end_offset < seg.base_offset:
            continue
        i = bisect.bisect_left(lasts, seg.base_offset)
        while i < len(ranges) and ranges[i].first_offset <= seg.end_offset:
            served = ranges[i]
            i += 1
            if served.segment.segment_id == seg.segment_id:
                continue
            lo, hi = max(seg.base_offset, served.first_offset), min(seg.end_offset, served.last_offset)
            mine, theirs = epochs_over(seg, lo, hi), epochs_over(served.segment, lo, hi)
            if mine is not None and theirs is not None and mine != theirs:
                out.append(Divergence(lo, hi, served.segment.segment_id, seg.segment_id, theirs, mine))
    out.sort(key=lambda d: (d.first_offset, str(d.served), str(d.other)))
    return out


def epochs_over(segment: SegmentMetadata, first: int, last: int) -> tuple[tuple[int, int], ...] | None:
    """The segment's leader-epoch lineage over offsets ``first``..``last``: ``(epoch, start)`` entries,
    the first moved up to ``first``. None when the segment recorded no epoch covering ``first``."""
    entries = sorted((start, epoch) for epoch, start in segment.leader_epochs)
    starts = [start for start, _ in entries]
    i = bisect.bisect_right(starts, first) - 1
    if i < 0:
        return None
    lineage = [(entries[i][1], first)]
    lineage.extend((epoch, start) for start, epoch in entries[i + 1 :] if start <= last)
    return tuple(lineage)


def check_on_boundary(served: ServedRange, base_offset: int, last_offset: int, path: str) -> None:
    """Refuse a batch that starts below the range it is read for: replicas hold the leader's batches byte
    for byte, so the previous range ends on a batch boundary of this segment too, and a batch across it
    means the two copies are not the same log."""
    if base_offset < served.first_offset:
        raise DivergentDataError(
            f"batch {base_offset}..{last_offset} crosses offset {served.first_offset}, "
            "where the segment before it ends: overlapping segments with different batches",
            topic=served.segment.topic,
            partition=served.segment.partition,
            offset=served.first_offset,
            path=path,
        )
