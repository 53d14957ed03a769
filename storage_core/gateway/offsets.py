"""ListOffsets, intercepted: the tier's part of a partition's offsets.

- earliest (-2): the tier's first offset when it is lower than the broker's log start.
- a timestamp: when the tier holds a record at least that recent below the broker's answer, that record.
- latest-tiered (-5): the tier's last offset (Kafka's meaning: the highest offset in remote storage).
- max-timestamp (-3): the tier's record when its timestamp is larger than the broker's answer's, or the
  same and at a lower offset (KIP-734: the first record carrying the log's largest timestamp). Kafka's
  own tiered storage looks at local segments only here (KAFKA-17552).
- latest (-1) and earliest-local (-4) are the broker's.
A partition the broker answered with an error keeps the error (authorization included).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from storage_core.gateway.protocol import replaced as replaced_fields

if TYPE_CHECKING:
    from storage_core.gateway.messages import ListOffsetsRequest, ListOffsetsResponse

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
TIER_QUESTIONS = frozenset({EARLIEST, MAX_TIMESTAMP, LATEST_TIERED})

Question = tuple[str, int, int]
"""(topic, partition, requested timestamp)."""


@dataclass(frozen=True, slots=True)
class TierOffset:
    offset: int
    timestamp: int
    leader_epoch: int


def questions(request: ListOffsetsRequest, response: ListOffsetsResponse) -> list[Question]:
    """The partitions whose answer may come from the tier: asked for earliest, max-timestamp,
    latest-tiered or a timestamp, and answered by the broker without an error."""
    asked = {(t.name, p.partition_index): p.timestamp for t in request.topics for p in t.partitions}
    out: list[Question] = []
    for t in response.topics:
        for p in t.partitions:
            ts = asked.get((t.name, p.partition_index))
            if ts is None or p.error_code != ErrorCode.none:
                continue
            if ts in TIER_QUESTIONS or ts >= 0:
                out.append((t.name, p.partition_index, ts))
    return out


def with_tier(
    response: ListOffsetsResponse, tier: Mapping[Question, TierOffset | None]
) -> ListOffsetsResponse:
    """The response with the tier's answers where they are Kafka's answer for a tiered log."""
    topics = []
    changed = False
    for t in response.topics:
        parts = []
        for p in t.partitions:
            replaced = p
            for (name, partition, ts), found in tier.items():
                if name != t.name or partition != p.partition_index:
                    continue
                better = _better(ts, p.offset, p.timestamp, found)
                if better is not None:
                    replaced = replaced_fields(
                        p, offset=better.offset, timestamp=better.timestamp, leader_epoch=better.leader_epoch
                    )
                    changed = True
            parts.append(replaced)
        topics.append(replaced_fields(t, partitions=tuple(parts)))
    return replaced_fields(response, topics=tuple(topics)) if changed else response


def _better(ts: int, offset: int, timestamp: int, found: TierOffset | None) -> TierOffset | None:
    """The tier's answer where it replaces the broker's (its partition answer: ``offset`` at
    ``timestamp``), else None."""
    if ts == LATEST_TIERED:
        return found if found is not None else TierOffset(-1, -1, -1)
    if found is None:
        return None
    if offset < 0:
        return found
    if ts == MAX_TIMESTAMP:
        later = (found.timestamp, -found.offset) > (timestamp, -offset)
        return found if later else None
    return found if found.offset < offset else None


def with_errors(
    response: ListOffsetsResponse, errors: Mapping[tuple[str, int], ErrorCode]
) -> ListOffsetsResponse:
    """The response with these partitions answered by an error (the tier could not be read)."""
    topics = []
    for t in response.topics:
        parts = tuple(
            replaced_fields(p, error_code=errors[(t.name, p.partition_index)], offset=-1, timestamp=-1)
            if (t.name, p.partition_index) in errors
            else p
            for p in t.partitions
        )
        topics.append(replaced_fields(t, partitions=parts))
    return replaced_fields(response, topics=tuple(topics))
