"""What a consumer group was delivered and what it committed, and the rule that says it read every record
exactly once with its commits holding.

A group's log is its deliveries and commit attempts, in the order its consumer saw them (one consumer per
group, so the order is exact). The rule, per partition:

- a delivery at the next offset is the normal case;
- a delivery below it is a re-read, allowed only when it starts exactly where the group resumes after a
  rebalance or a reconnect: its last successful commit of the partition, or a later commit whose answer the
  client never got (the connection died with the request in flight: the broker may have stored it). The
  records between that point and the old position are then delivered again, once each; a record below
  the commit never comes back;
- a delivery above the next offset is a skip, never allowed;
- at the end every partition has been read to its end and that end committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import NamedTuple


class Delivered(NamedTuple):
    partition: int
    offset: int


class Committed(NamedTuple):
    """A commit attempt of ``offset`` (the position: the next offset to read); ``success`` False: the
    client got an error, so the broker may or may not have stored it."""

    partition: int
    offset: int
    success: bool


Event = Delivered | Committed


@dataclass
class GroupLog:
    events: list[Event] = field(default_factory=list)

    @property
    def delivered(self) -> int:
        return sum(1 for e in self.events if isinstance(e, Delivered))


def problems(log: GroupLog, starts: dict[int, int], ends: dict[int, int]) -> list[str]:
    """Every violation of the rule in the module's text (empty: exactly once, commits holding)."""
    position = dict(starts)
    resume_points = {p: {start} for p, start in starts.items()}
    out: list[str] = []
    for n, event in enumerate(log.events):
        p = event.partition
        if p not in position:
            out.append(f"event {n}: partition {p} is not one of {sorted(position)}")
            continue
        if isinstance(event, Committed):
            if event.success:
                resume_points[p] = {event.offset}
            else:
                resume_points[p].add(event.offset)
            continue
        if event.offset > position[p]:
            out.append(f"event {n}: partition {p} skipped {position[p]}..{event.offset - 1}")
        elif event.offset < position[p] and event.offset not in resume_points[p]:
            out.append(
                f"event {n}: partition {p} went back to {event.offset} (position {position[p]}), not to a "
                f"commit ({sorted(resume_points[p])})"
            )
        position[p] = event.offset + 1
    for p, end in ends.items():
        if position[p] != end:
            out.append(f"partition {p} ended at {position[p]}, not at its end {end}")
        if resume_points[p] != {end}:
            out.append(f"partition {p}: the last commit is not its end {end} ({sorted(resume_points[p])})")
    return out


def verifiable_consumer_event(line: str, topic: str) -> list[Event]:
    """The events of one line of Kafka's VerifiableConsumer (--verbose): record_data and
    offsets_committed (every other kind, and other topics, give none)."""
    try:
        data = json.loads(line)
    except ValueError:
        return []
    if data.get("name") == "record_data" and data.get("topic") == topic:
        return [Delivered(int(data["partition"]), int(data["offset"]))]
    if data.get("name") == "offsets_committed":
        return [
            Committed(int(o["partition"]), int(o["offset"]), bool(data.get("success")))
            for o in data.get("offsets") or []
            if o.get("topic") == topic
        ]
    return []
