"""What the planner is told: the resources as parsed, and what was observed in Kafka and about running work.

Plain frozen data, built by the callers' adapters (Kafka Admin, the Kubernetes API, in-process runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.errors import TierkeeperError


@dataclass(frozen=True)
class PartitionLeader:
    partition: int
    leader: int | None
    """The broker id of the current leader; None while the partition has none."""


@dataclass(frozen=True)
class KafkaTopic:
    """A topic as Kafka describes it."""

    name: str
    topic_id: str
    configs: Mapping[str, str]
    """Effective topic configuration (explicit and inherited values)."""
    partitions: tuple[PartitionLeader, ...]


@dataclass(frozen=True)
class TopicInput:
    """One TieredTopic: its key (namespace/name or file/name), its parsed spec or why it did not parse,
    its previous status (the planner's memory), and Kafka's view of its topic."""

    key: str
    generation: int | None
    spec: TieredTopicSpec | None
    problem: str | None
    status: TieredTopicStatus
    kafka: KafkaTopic | None = None
    """None when the topic does not exist (or kafka_error says why it could not be looked up)."""
    kafka_error: str | None = None


@dataclass(frozen=True)
class BrokerInput:
    key: str
    generation: int | None
    spec: TieredBrokerSpec | None
    problem: str | None
    status: TieredBrokerStatus
    problem_on_platform: str | None = None
    """A reason this platform cannot use the broker (e.g. no PVC on Kubernetes), from the caller."""


@dataclass(frozen=True)
class RunningWork:
    """Work in progress: at most one copy per broker and one cleanup per topic run at a time."""

    copy_brokers: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    """(cluster name, broker id) of every broker with a copy run (Job) in progress."""
    cleanup_topics: frozenset[str] = field(default_factory=frozenset)
    """Keys of TieredTopics with a cleanup run in progress."""


def observe_topic(admin: Any, topic: str) -> tuple[KafkaTopic | None, str | None]:
    """What Kafka says of ``topic`` through ``admin`` (the Kafka Admin adapter, passed in): the topic, or
    None when it does not exist; or the reason Kafka could not be asked. Shared by the operator's rounds
    and standalone mode so both observe alike."""
    try:
        described = admin.describe_if_exists(topic)
        if not described:
            return None, None
        configs = admin.topic_configs(topic)
    except TierkeeperError as exc:
        return None, str(exc)
    infos = sorted(described.values(), key=lambda i: i.partition)
    leaders = tuple(PartitionLeader(i.partition, i.leader) for i in infos)
    return KafkaTopic(name=topic, topic_id=infos[0].topic_id, configs=configs, partitions=leaders), None
