"""What the planner is told: the resources as parsed, and what was observed in Kafka and about running work.

Plain frozen data, built by the callers' adapters (Kafka Admin, the Kubernetes API, in-process runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.errors import ConfigError, TierkeeperError
from storage_core.tiering.eligibility import TIERING_CONFIG_KEYS


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
    empty: bool = False
    """Every partition holds no record (log end = log start): nothing to copy yet. False when unknown."""


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
    """Why Kafka could not be asked (:func:`kafka_problem`): retried unless a :class:`ClientConfigProblem`."""


class ClientConfigProblem(str):
    """A ``kafka_error`` caused by the cluster's own client configuration (its Secret not mounted, a file
    that cannot be read): no retry can help, so the planner reports it as Stalled, not KafkaUnreachable."""

    __slots__ = ()


def kafka_problem(exc: TierkeeperError) -> str:
    """The ``kafka_error`` of a Kafka lookup that raised ``exc`` (a :class:`ClientConfigProblem` for a
    :class:`ConfigError`): what the operator's rounds and standalone mode both pass to the planner."""
    return ClientConfigProblem(exc) if isinstance(exc, ConfigError) else str(exc)


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
    """Work in progress: at most one copy per broker, one cleanup and one table run per topic at a time."""

    copy_brokers: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    """(cluster name, broker id) of every broker with a copy run (Job) in progress."""
    cleanup_topics: frozenset[str] = field(default_factory=frozenset)
    """Keys of TieredTopics with a cleanup run in progress."""
    table_topics: frozenset[str] = field(default_factory=frozenset)
    """Keys of TieredTopics with an export or table maintenance run in progress."""


CONFIG_BATCH = 500
"""Topics per describe-configs request."""
CONFIG_MAX_AGE_S = 300.0
"""How long the operator trusts a topic's configs before it asks Kafka again (:class:`TopicConfigs`)."""


@dataclass
class TopicConfigs:
    """The tiering configs (:data:`TIERING_CONFIG_KEYS`) of one cluster's topics, each re-read from Kafka
    once older than ``max_age`` seconds, or when the topic was recreated (a new topic id).

    Describing every topic's configs was the costliest request of a round: for 10,000 topics the broker
    builds and sends ~330,000 entries (every config of every topic) and the client decodes them, every
    round, for values that rarely change. Trusting them for a while is safe: every copy and cleanup Job
    re-reads them and refuses on its own before it acts, so a config change reaches the status (Stalled)
    at most ``max_age`` late and never lets a Job tier or trim what it must not.
    """

    max_age: float = CONFIG_MAX_AGE_S
    _read: dict[str, tuple[str, float, dict[str, str]]] = field(default_factory=dict)
    """topic -> (topic id, when read, configs)."""

    def stale(self, topic: str, topic_id: str, now: float) -> bool:
        entry = self._read.get(topic)
        return entry is None or entry[0] != topic_id or now - entry[1] >= self.max_age

    def put(self, topic: str, topic_id: str, now: float, configs: Mapping[str, str]) -> None:
        self._read[topic] = (topic_id, now, {k: v for k, v in configs.items() if k in TIERING_CONFIG_KEYS})

    def get(self, topic: str) -> dict[str, str]:
        return self._read[topic][2]

    def keep_only(self, topics: Iterable[str]) -> None:
        """Forget topics no longer asked about (their TieredTopic or Kafka topic is gone)."""
        wanted = set(topics)
        for name in [n for n in self._read if n not in wanted]:
            del self._read[name]


def observe_topics(
    admin: Any, topics: Iterable[str], configs_cache: TopicConfigs | None = None, now: float = 0.0
) -> dict[str, tuple[KafkaTopic | None, str | None]]:
    """What Kafka says of ``topics`` of one cluster through ``admin`` (the Kafka Admin adapter, passed
    in), by topic: the topic, or None when it does not exist; or the reason Kafka could not be asked.
    Shared by the operator's rounds and standalone mode so both observe alike. A few batched Admin
    requests (describe, log start and end offsets, configs 500 topics a request) whatever the number of
    topics: what makes 10,000 TieredTopics one round's work rather than 40,000 round trips. Also says
    which topics hold no record at all (their first copy has nothing to do); offsets that cannot be read
    leave a topic "not known empty". With ``configs_cache`` (``now`` in seconds on the caller's clock),
    configs are asked only for the topics whose cached ones are stale (:class:`TopicConfigs`)."""
    names = sorted(set(topics))
    described, errors = admin.describe_many(names)
    ids = {name: next(iter(parts.values())).topic_id for name, parts in described.items() if parts}
    cache = configs_cache if configs_cache is not None else TopicConfigs(max_age=0.0)
    stale = [name for name in described if name in ids and cache.stale(name, ids[name], now)]
    config_errors: dict[str, str] = {}
    # A few hundred topics a request: Kafka answers with every config of every topic asked (~33 each), so
    # 10,000 at once would be ~330,000 entries alive together in this process before the few the rules
    # read are kept; batches bound that peak (issue 15: operator RSS at 10,000 TieredTopics).
    for start in range(0, len(stale), CONFIG_BATCH):
        read, failed = admin.topic_configs_many(stale[start : start + CONFIG_BATCH])
        for name, values in read.items():
            cache.put(name, ids[name], now, values)
        config_errors.update(failed)
    cache.keep_only(ids)
    errors = {**errors, **config_errors}
    partitions = [tp for name in described if name not in errors for tp in described[name]]
    try:
        starts = admin.log_start_offsets(partitions)
        ends = admin.high_watermarks(partitions)
    except TierkeeperError:
        starts, ends = {}, {}
    out: dict[str, tuple[KafkaTopic | None, str | None]] = {}
    for name in names:
        if name in errors:
            out[name] = (None, errors[name])
            continue
        if name not in described or not described[name]:
            out[name] = (None, None)
            continue
        infos = sorted(described[name].values(), key=lambda i: i.partition)
        keys = [(name, i.partition) for i in infos]
        empty = all(k in starts and k in ends and starts[k] >= ends[k] for k in keys)
        out[name] = (
            KafkaTopic(
                name=name,
                topic_id=infos[0].topic_id,
                configs=cache.get(name),
                partitions=tuple(PartitionLeader(i.partition, i.leader) for i in infos),
                empty=empty,
            ),
            None,
        )
    return out
