"""What Kafka says of the consumer groups reading a topic, and what the gateways say of the groups they
serve (confluent-kafka): the observation the trim hold decides on (``retention.trim_hold``).

Groups: ListGroups for the classic and KIP-848 ``consumer`` groups, DescribeGroups / ConsumerGroupDescribe
for their members (member ids and group.instance.ids), OffsetFetch for their committed offsets on the
topic's partitions. Sightings: the gateways' compacted topic (``gateway.group_sightings``) read from its
log start to its high watermarks by an assigned consumer that joins no group and commits nothing; a
missing topic means no gateway reported anything.

Never trim on missing information: any failure to list, describe, fetch offsets or read the sightings
(coordinator unreachable, timeout, authorization) is :class:`GroupsUnknown`, never an empty answer. A group
deleted between the listing and a later request is simply gone.

Share groups (KIP-932) are not read: confluent-kafka 2.16 (librdkafka 2.16) has no Admin call for them
(no DescribeShareGroupOffsets), and Kafka 4.1 has them as a preview, off unless ``share.version`` is
enabled. The listing asks for classic and consumer groups only, so a share group is neither an error nor a
holder: a share group reading a tiered topic directly is not protected by the hold.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.errors import KafkaAdminError, TierkeeperError
from storage_core.faults import fault_point
from storage_core.gateway.group_sightings import SIGHTINGS_TOPIC, GroupSighting, latest_sightings

Member = tuple[str, str | None]
"""(member id, group.instance.id or None), as Kafka describes a group member."""


@dataclass(frozen=True)
class KafkaGroup:
    """One consumer group as Kafka describes it, with its committed offsets on one topic."""

    group: str
    protocol: str
    """``classic`` or ``consumer`` (KIP-848)."""
    members: tuple[Member, ...]
    committed: dict[int, int]
    """Partition -> committed offset (partitions without a commit left out)."""


class GroupsUnknown(KafkaAdminError):
    """The groups (or the gateways' sightings) could not be read: the trim must not move."""


class GroupPositions:
    """The groups of a cluster, topic by topic, and its gateways' sightings (read once per instance: a
    cleanup run makes one)."""

    def __init__(self, admin: KafkaAdmin) -> None:
        self._admin = admin
        self._sightings: dict[str, list[GroupSighting]] | None = None

    def topic_groups(self, topic: str, partitions: Iterable[int]) -> list[KafkaGroup]:
        """Every classic and consumer group with its members and committed offsets on ``partitions`` of
        ``topic``; :class:`GroupsUnknown` when any of it cannot be read."""
        wanted = sorted(set(partitions))
        try:
            fault_point("cleanup.groups.observe")
            listed = self._list()
            described = self._describe(sorted(listed))
            committed = self._committed(list(described), topic, wanted)
            return [
                KafkaGroup(group, listed[group], members, committed[group])
                for group, members in described.items()
                if group in committed
            ]
        except GroupsUnknown:
            raise
        except TierkeeperError as exc:
            raise GroupsUnknown(str(exc)) from exc

    def sightings(self) -> dict[str, list[GroupSighting]]:
        """The gateways' live sightings by group (``latest_sightings`` of the whole topic)."""
        if self._sightings is None:
            try:
                self._sightings = latest_sightings(self._sighting_records())
            except GroupsUnknown:
                raise
            except TierkeeperError as exc:
                raise GroupsUnknown(f"read {SIGHTINGS_TOPIC}: {exc}") from exc
        return self._sightings

    def _list(self) -> dict[str, str]:
        from confluent_kafka import ConsumerGroupType

        future = self._admin.client.list_consumer_groups(
            types={ConsumerGroupType.CLASSIC, ConsumerGroupType.CONSUMER},
            request_timeout=self._admin.timeout,
        )
        result = self._admin.wait({"of the cluster": future}, "list consumer groups")["of the cluster"]
        if result.errors:
            # Some coordinator did not answer: the groups it manages are unknown, not absent.
            said = "; ".join(str(e) for e in result.errors[:3])
            raise GroupsUnknown(f"list consumer groups on {self._admin.bootstrap_servers}: {said}")
        return {
            g.group_id: "consumer" if getattr(g, "type", None) == ConsumerGroupType.CONSUMER else "classic"
            for g in result.valid or []
        }

    def _describe(self, groups: list[str]) -> dict[str, tuple[Member, ...]]:
        from confluent_kafka import ConsumerGroupState

        if not groups:
            return {}
        futures = self._admin.client.describe_consumer_groups(groups, request_timeout=self._admin.timeout)
        out: dict[str, tuple[Member, ...]] = {}
        for group, future in futures.items():
            answer = self._answer(future, "describe consumer group", group)
            if answer is None or getattr(answer, "state", None) == ConsumerGroupState.DEAD:
                continue  # deleted since the listing
            out[group] = tuple((m.member_id, m.group_instance_id or None) for m in answer.members)
        return out

    def _committed(self, groups: list[str], topic: str, partitions: list[int]) -> dict[str, dict[int, int]]:
        """Each group's committed offsets on ``partitions`` (groups gone since the listing left out). One
        request per group (librdkafka asks one group per OffsetFetch), all sent before the first wait."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        if not partitions:
            return {group: {} for group in groups}
        futures = {
            group: self._admin.client.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])],
                request_timeout=self._admin.timeout,
            )[group]
            for group in groups
        }
        out: dict[str, dict[int, int]] = {}
        for group, future in futures.items():
            answer = self._answer(future, "list committed offsets of group", group)
            if answer is None:
                continue
            offsets = out[group] = {}
            for tp in answer.topic_partitions or []:
                if tp.error is not None:
                    raise GroupsUnknown(
                        f"committed offset of group {group} on {topic}-{tp.partition} on "
                        f"{self._admin.bootstrap_servers}: {tp.error}"
                    )
                if tp.topic == topic and tp.offset >= 0:
                    offsets[tp.partition] = int(tp.offset)
        return out

    def _answer(self, future: Any, what: str, group: str) -> Any:
        """The future's result; None when Kafka says the group does not exist (any other failure raises)."""
        try:
            return self._admin.wait({group: future}, what)[group]
        except KafkaAdminError as exc:
            if _group_gone(exc.__cause__):
                return None
            raise GroupsUnknown(str(exc)) from exc

    def _sighting_records(self) -> list[tuple[bytes | None, bytes | None]]:
        described = self._admin.describe_if_exists(SIGHTINGS_TOPIC)
        if not described:
            return []
        starts = self._admin.log_start_offsets(described)
        ends = self._admin.high_watermarks(described)
        pending = {p: (starts[(t, p)], ends[(t, p)]) for t, p in described if ends[(t, p)] > starts[(t, p)]}
        if not pending:
            return []
        return _read_to_ends(self._admin, pending)


def _read_to_ends(
    admin: KafkaAdmin, ranges: Mapping[int, tuple[int, int]]
) -> list[tuple[bytes | None, bytes | None]]:
    """The (key, value) of every record of the sightings topic's partitions in [start, end), partition by
    partition in offset order (a key always lands on one partition, so its order is kept)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    config = {
        "bootstrap.servers": admin.bootstrap_servers,
        **admin.client_config,
        # A group id librdkafka wants, never used: assigned, no commits, so Kafka never lists it.
        "group.id": f"tierkeeper-trim-hold-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "enable.partition.eof": "true",
        "auto.offset.reset": "error",
        "isolation.level": "read_uncommitted",
    }
    try:
        consumer = Consumer(config)
    except KafkaException:
        raise GroupsUnknown(f"read {SIGHTINGS_TOPIC}: Kafka consumer configuration refused") from None
    records: dict[int, list[tuple[bytes | None, bytes | None]]] = {p: [] for p in ranges}
    pending = set(ranges)
    deadline = time.monotonic() + admin.timeout
    try:
        consumer.assign([TopicPartition(SIGHTINGS_TOPIC, p, start) for p, (start, _) in ranges.items()])
        while pending:
            if time.monotonic() > deadline:
                raise GroupsUnknown(
                    f"read {SIGHTINGS_TOPIC} on {admin.bootstrap_servers}: partitions {sorted(pending)} not "
                    f"read to their ends within {admin.timeout:.0f} s"
                )
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error, partition = msg.error(), msg.partition()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise GroupsUnknown(f"read {SIGHTINGS_TOPIC} on {admin.bootstrap_servers}: {error.str()}")
            if partition not in pending:
                continue
            end = ranges[partition][1]
            if error is None:
                records[partition].append((msg.key(), msg.value()))
                if msg.offset() >= end - 1:
                    pending.discard(partition)
            elif msg.offset() >= end:
                pending.discard(partition)
    finally:
        consumer.close()
    return [r for p in sorted(records) for r in records[p]]


def _group_gone(exc: BaseException | None) -> bool:
    """Whether ``exc`` is Kafka saying the group does not exist (deleted, or its offsets expired)."""
    from confluent_kafka import KafkaError, KafkaException

    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(error, KafkaError) and error.code() == KafkaError.GROUP_ID_NOT_FOUND
