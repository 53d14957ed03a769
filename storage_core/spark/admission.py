"""How far one micro-batch may read: ``maxOffsetsPerTrigger`` and ``maxBytesPerTrigger`` (pure).

``maxOffsetsPerTrigger`` is shared out as the Kafka source does it: each partition gets the limit
prorated by its share of the pending offsets, rounded down, and at least one offset when it has any
(so the total may pass the limit by less than the number of partitions). ``maxBytesPerTrigger`` is
exact from the manifests: a batch takes whole tiered segments (their stored sizes), each partition up
to its prorated share of the bytes, and always at least one segment overall so a segment larger than
the limit is still read. A segment the batch starts in the middle of counts with its whole size.
Offsets past a partition's segments (``continueFromKafka``: the brokers' tail, whose size is known only
once read) count no bytes: a partition whose segments all fit reads to its end, bounded only by
``maxOffsetsPerTrigger``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Pending:
    """What one partition has to read: offsets [start, end) and the tiered segments over them."""

    start: int
    end: int
    segments: tuple[tuple[int, int], ...] = ()
    """(offset after the segment's served range, stored bytes), in offset order, of the tiered segments
    that hold offsets of [start, end) (with continueFromKafka, offsets after them are the brokers')."""

    @property
    def offsets(self) -> int:
        return max(0, self.end - self.start)

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.segments)


def admit(pending: dict[K, Pending], max_offsets: int | None, max_bytes: int | None) -> dict[K, int]:
    """Per partition, the end (exclusive) of the next micro-batch: at most ``end``, never below ``start``."""
    out = {p: pend.end if pend.offsets else pend.start for p, pend in pending.items()}
    if max_offsets is not None:
        out = _by_offsets(pending, out, max_offsets)
    if max_bytes is not None:
        out = {p: min(out[p], end) for p, end in _by_bytes(pending, max_bytes).items()}
    return {p: max(pending[p].start, end) for p, end in out.items()}


def _by_offsets(pending: dict[K, Pending], ends: dict[K, int], limit: int) -> dict[K, int]:
    total = sum(p.offsets for p in pending.values())
    if total <= limit:
        return ends
    out = {}
    for p, pend in pending.items():
        share = limit * pend.offsets / total
        take = math.ceil(share) if 0 < share < 1 else math.floor(share)
        out[p] = pend.start + min(pend.offsets, take)
    return out


def _by_bytes(pending: dict[K, Pending], limit: int) -> dict[K, int]:
    total = sum(p.bytes for p in pending.values())
    ends = {p: pend.end if pend.offsets else pend.start for p, pend in pending.items()}
    if total <= limit:
        return ends
    out = {p: pend.start for p, pend in pending.items()}
    for p, pend in pending.items():
        if not pend.offsets:
            continue
        allowance = limit * pend.bytes // total
        used = 0
        for seg_end, size in pend.segments:
            if used + size > allowance:
                break
            used += size
            out[p] = min(pend.end, seg_end)
        else:
            out[p] = pend.end  # every segment fits: the offsets after them (the brokers') count no bytes
    if all(out[p] == pend.start for p, pend in pending.items()):
        # Every share is smaller than its next segment: the partition with the most pending bytes reads
        # one segment, so the stream always moves.
        p, pend = max(
            ((p, pend) for p, pend in pending.items() if pend.segments and pend.offsets),
            key=lambda item: item[1].bytes,
        )
        out[p] = min(pend.end, pend.segments[0][0])
    return out
