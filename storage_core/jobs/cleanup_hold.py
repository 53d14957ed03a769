"""The trim hold's observe step for cleanup: once per topic, what Kafka and the gateways say of its
consumer groups, what the tier remembers of them, and so which groups hold its trim this round
(the decision is ``retention.trim_hold``'s)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from storage_core.adapters.kafka_groups import GroupPositions, GroupsUnknown, KafkaGroup
from storage_core.api.trim_hold import TrimHold
from storage_core.errors import TierkeeperError
from storage_core.gateway.group_sightings import GroupSighting, direct_members
from storage_core.remote.catalog import read_trim_hold_state, write_trim_hold_state
from storage_core.remote.layout import RemoteLayout
from storage_core.remote.store_api import ObjectStore
from storage_core.retention.trim_hold import GroupSeen, holding_offsets, remember


@dataclass(frozen=True)
class TopicHold:
    """What holds a topic's trim this round (picklable: Spark tasks receive it in their work)."""

    holders: dict[str, dict[int, int]] = field(default_factory=dict)
    """Holding group -> partition -> committed offset."""
    unknown: str | None = None
    """Why the groups are unknown: then nothing of the topic is trimmed."""

    def on(self, partition: int) -> dict[str, int]:
        """The holding groups' committed offsets on ``partition``."""
        return {g: offsets[partition] for g, offsets in self.holders.items() if partition in offsets}


def group_seen(group: KafkaGroup, sightings: Mapping[str, list[GroupSighting]], now_ms: int) -> GroupSeen:
    """What the trim hold needs of one group: a member is direct when no fresh sighting carried any of
    its ids (member id, group.instance.id)."""
    direct = False
    for member_id, instance_id in group.members:
        ids = {member_id} if instance_id is None else {member_id, instance_id}
        if direct_members(ids, sightings, group.group, now_ms) == ids:
            direct = True
    return GroupSeen(
        group=group.group,
        committed=dict(group.committed),
        members=len(group.members),
        direct=direct,
        gateway_seen_ms=max((s.seen_ms for s in sightings.get(group.group, ())), default=None),
    )


def observe_hold(
    positions: GroupPositions,
    store: ObjectStore,
    layout: RemoteLayout,
    topic: str,
    topic_id: str,
    partitions: Iterable[int],
    hold: TrimHold,
    *,
    now_ms: int,
    dry_run: bool,
) -> TopicHold:
    """The topic's :class:`TopicHold`, its memory rewritten (not in a dry run). Anything that cannot be read
    (Kafka's groups, the sightings, the memory) makes the hold unknown: never trim on missing information."""
    try:
        groups = positions.topic_groups(topic, partitions)
        sightings = positions.sightings()
    except GroupsUnknown as exc:
        return TopicHold(unknown=f"consumer group offsets unavailable: {exc}")
    seen = [group_seen(g, sightings, now_ms) for g in groups]
    try:
        previous = read_trim_hold_state(store, layout, topic, topic_id)
        memory = remember(previous, seen, now_ms)
        if not dry_run and memory != previous:
            write_trim_hold_state(store, layout, topic, topic_id, memory)
    except TierkeeperError as exc:
        return TopicHold(unknown=f"trim-hold state: {exc}")
    return TopicHold(holding_offsets(seen, memory, hold, now_ms))
