"""What a gateway writes to the sightings topic next, from what it carries now and what it wrote last
(pure; the writing is gateway_server/group_publisher.py's).

- A group whose members changed is written at once, so a member that left (and may now read directly)
  stops being counted as carried by the next cleanup round, not ``FRESH_MS`` later.
- A group it still carries is written again every ``REPUBLISH_MS``: a sighting's age is how a reader
  tells a live gateway from one that went away without a word.
- A group it no longer carries (its last member here left or disconnected) is written once more with no
  members, then forgotten. That record, not a tombstone, is the last word: the group was read through this
  gateway until then. A tombstone would erase that, and an empty group with no sighting at all looks as if
  it had been read directly (it would hold the trim until it had been empty for the hold's inactive time).
  The topic's ``retention.ms`` (``SIGHTINGS_RETENTION_MS``) removes such records in the end.
- Nothing is written at shutdown: a rolling restart's consumers reconnect to another replica, which writes
  its own sighting of them; meanwhile this replica's last one is still fresh and covers them. An empty
  record at shutdown would make them look direct for that moment instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from storage_core.gateway.group_members import Carried
from storage_core.gateway.group_sightings import REPUBLISH_MS, GroupProtocol, GroupSighting

SIGHTINGS_RETENTION_MS = 7 * 24 * 3600 * 1000
"""The topic's ``retention.ms`` (it is ``compact,delete``): a record not rewritten for this long is
removed. Kafka's default ``offsets.retention.minutes``: an empty group's committed offsets are forgotten
after as long, so its last sighting has nothing left to speak for."""


@dataclass(frozen=True, slots=True)
class Written:
    """The last record of one group this gateway wrote (and Kafka acknowledged)."""

    protocol: GroupProtocol
    members: frozenset[str]
    at_ms: int


def due(
    carried: Mapping[str, Carried], written: Mapping[str, Written], gateway: str, now_ms: int
) -> list[GroupSighting]:
    """The sightings to write now, in group order."""
    out = []
    for group, now in carried.items():
        last = written.get(group)
        if (
            last is None
            or last.members != now.members
            or last.protocol != now.protocol
            or now_ms - last.at_ms >= REPUBLISH_MS
        ):
            out.append(_sighting(group, gateway, now.protocol, now.members, now_ms))
    for group, last in written.items():
        if group not in carried:
            out.append(_sighting(group, gateway, last.protocol, frozenset(), now_ms))
    return sorted(out, key=lambda s: s.group)


def after_writing(written: Mapping[str, Written], acknowledged: list[GroupSighting]) -> dict[str, Written]:
    """``written`` once ``acknowledged`` are in the topic: a group's record replaced, and a group written
    empty forgotten (it is not written again until a member comes back)."""
    out = dict(written)
    for sighting in acknowledged:
        if sighting.members:
            out[sighting.group] = Written(sighting.protocol, frozenset(sighting.members), sighting.seen_ms)
        else:
            out.pop(sighting.group, None)
    return out


def _sighting(
    group: str, gateway: str, protocol: GroupProtocol, members: frozenset[str], now_ms: int
) -> GroupSighting:
    return GroupSighting(
        group=group, gateway=gateway, protocol=protocol, members=tuple(sorted(members)), seen_ms=now_ms
    )


@dataclass(frozen=True, slots=True)
class TopicSettings:
    partitions: int
    replication_factor: int
    config: dict[str, str]


def topic_settings(brokers: int) -> TopicSettings:
    """How the gateway creates the sightings topic on a cluster of ``brokers`` brokers: one partition (the
    cleanup reads all of it each round, and it is groups x gateway replicas records small), replicated as
    Kafka's own internal topics are (up to 3), ``min.insync.replicas`` one below that so one broker down
    does not stop the writes, compacted to one record per key and with a retention for groups gone.

    ``segment.ms`` rolls the active segment every 10 minutes: the log cleaner never touches the active
    segment, and the records rewritten every REPUBLISH_MS would otherwise pile up there for Kafka's default
    week before compaction (the cleanup reads every one of them)."""
    replicas = max(1, min(3, brokers))
    return TopicSettings(
        partitions=1,
        replication_factor=replicas,
        config={
            "cleanup.policy": "compact,delete",
            "retention.ms": str(SIGHTINGS_RETENTION_MS),
            "min.insync.replicas": str(max(1, replicas - 1)),
            "segment.ms": str(10 * 60 * 1000),
        },
    )
