"""Plan one reconcile round for every TieredTopic and TieredBroker: what to run and what status to write.

Pure: the callers observe (Kafka Admin, the Kubernetes API or the local log dirs, running Jobs) and pass
it in; they execute the returned actions and fold each run's result back in with
:mod:`storage_core.reconcile.outcomes`. The operator and ``tierkeeper standalone`` share this module.

Rules:
- A topic is tiered only when its spec is valid, its cluster is configured, its Kafka topic exists and
  can be tiered safely (:mod:`storage_core.reconcile.eligibility`), and every partition's leader has a
  usable TieredBroker. Otherwise it is Stalled with a message, and nothing runs for it.
- Copies: every partition is copied by one writer at a time, from its current leader's log dir. One copy
  action per broker per round covers the due partitions that broker leads, over all topics; none is
  planned for a broker whose previous copy still runs.
- Cleanup (remote retention, orphan sweep, local trim): per topic, on its own interval, one at a time,
  from the first finished copy round on: the first waits until no broker leading the topic has a copy
  running, so it trims behind every leader's first copy rather than only the first one recorded.
- Conditions (kstatus, :mod:`storage_core.reconcile.conditions`): Reconciling until the topic's first copy
  round finished, while Kafka cannot be reached, and while the last runs failed fewer than
  ``FAILURES_BEFORE_STALLED`` times in a row; Stalled while a refusal stands or past that bound; Ready
  otherwise. Scheduled rounds change neither. Beside them, while the last cleanup found direct readers
  holding the local trim (or a bound overriding them, or their offsets unknown), ``TrimHeld``
  (:mod:`storage_core.reconcile.trim_holds`) says so; it never changes Ready (a held trim is the hold
  working), and a bound overridden or unknown offsets are a Warning Event.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.resources import ClusterMemberSpec, TieredTopicSpec
from storage_core.api.status import RECONCILING, STALLED, TieredBrokerStatus, TieredTopicStatus
from storage_core.reconcile.conditions import Health, conditions_for, run_failure
from storage_core.reconcile.eligibility import refusals
from storage_core.reconcile.observed import BrokerInput, ClientConfigProblem, RunningWork, TopicInput
from storage_core.reconcile.schedule import copy_due, copy_due_next, interval_due, interval_due_next
from storage_core.reconcile.tables import TableAction, decide_table, with_lag
from storage_core.reconcile.trim_holds import trim_condition, warns


@dataclass(frozen=True, slots=True)
class CleanupAction:
    """Remote retention, orphan sweep and local trim of one topic."""

    cluster: str
    topic_key: str
    topic: str
    spec: TieredTopicSpec


@dataclass(frozen=True, slots=True)
class Event:
    key: str
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic_key: str
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CopyAction:
    """Copy the listed partitions (all led by ``broker_id``) from that broker's log dir."""

    cluster: str
    broker_id: int
    broker_key: str
    work: tuple[TopicPartitions, ...]


@dataclass
class Plan:
    copies: list[CopyAction] = field(default_factory=list)
    cleanups: list[CleanupAction] = field(default_factory=list)
    tables: list[TableAction] = field(default_factory=list)
    """Exports and table maintenance (spec.table, :mod:`storage_core.reconcile.tables`)."""
    topic_status: dict[str, TieredTopicStatus] = field(default_factory=dict)
    broker_status: dict[str, TieredBrokerStatus] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    topic_cluster: dict[str, str] = field(default_factory=dict)
    """Key -> cluster name of every TieredTopic judged whose spec parsed (per-cluster metrics)."""
    topic_name: dict[str, str] = field(default_factory=dict)
    """Key -> Kafka topic of the same TieredTopics (the trim-hold metrics name the topic Kafka knows)."""
    next_due: datetime.datetime | None = None
    """The earliest time after ``now`` at which a copy or cleanup of a topic judged here falls due (a
    scheduled copy only within the next minutes), so a round runner can run its next round then rather
    than at its own interval. None: nothing known to fall due."""

    def due_at(self, when: datetime.datetime | None, now: datetime.datetime) -> None:
        """Note work falling due at ``when`` (ignored unless after ``now``)."""
        if when is not None and when > now and (self.next_due is None or when < self.next_due):
            self.next_due = when


@dataclass(frozen=True)
class _Leaders:
    """A tierable topic's partitions by the broker leading them."""

    by_broker: dict[int, tuple[int, ...]]


def admission(
    spec: ClusterMemberSpec | None, problem: str | None, clusters: Mapping[str, KafkaClusterConfig]
) -> Health | None:
    """What can be said from the object alone: its spec is invalid or names an unknown cluster (Stalled),
    or None when it is usable so far. The operator writes this at once on create/update."""
    if spec is None:
        return Health(False, "InvalidSpec", problem or "invalid spec", stalled=True)
    if spec.cluster_ref.name not in clusters:
        return Health(False, "ClusterNotFound", _no_cluster(spec.cluster_ref.name), stalled=True)
    return None


PENDING = Health(False, "FirstCopyPending", "waiting for the first copy round", reconciling=True)


def _broker_health(broker: BrokerInput, clusters: Mapping[str, KafkaClusterConfig]) -> Health:
    verdict = admission(broker.spec, broker.problem, clusters)
    if verdict is not None or broker.spec is None:
        return verdict or Health(False, "InvalidSpec", "invalid spec", stalled=True)
    if broker.problem_on_platform:
        return Health(False, "BrokerUnusable", broker.problem_on_platform, stalled=True)
    if broker.spec.paused:
        return Health(True, "Paused", "paused: no copy runs from this broker")
    last = broker.status.last_copy
    if last is not None and last.result == "Failed":
        return run_failure("CopyFailed", "copy", last)
    paths = [d.path for d in broker.spec.log_dirs()]
    if len(paths) == 1:
        return Health(True, "Ready", f"log dir {paths[0]} is used for copies")
    return Health(True, "Ready", f"log dirs {', '.join(paths)} are used for copies")


def _no_cluster(name: str) -> str:
    return f"clusterRef.name {name!r} is not in the operator's cluster configuration"


def _usable_brokers(
    brokers: Sequence[BrokerInput], clusters: Mapping[str, KafkaClusterConfig]
) -> dict[tuple[str, int], BrokerInput]:
    out: dict[tuple[str, int], BrokerInput] = {}
    for broker in brokers:
        spec = broker.spec
        if spec is None or spec.paused or spec.cluster_ref.name not in clusters or broker.problem_on_platform:
            continue
        out[(spec.cluster_ref.name, spec.broker_id)] = broker
    return out


def _topic_verdict(
    topic: TopicInput,
    clusters: Mapping[str, KafkaClusterConfig],
    usable: Mapping[tuple[str, int], BrokerInput],
) -> tuple[Health, _Leaders | None]:
    """The topic's health, and its partitions by leader when copies and cleanups may run for it."""
    spec = topic.spec
    verdict = admission(spec, topic.problem, clusters)
    if verdict is not None or spec is None:
        return verdict or Health(False, "InvalidSpec", "invalid spec", stalled=True), None
    cluster = spec.cluster_ref.name
    if isinstance(topic.kafka_error, ClientConfigProblem):  # a person must fix the mount or the config
        return Health(False, "KafkaClientConfigInvalid", topic.kafka_error, stalled=True), None
    if topic.kafka_error is not None:  # retried every round: passing trouble, not a failure
        return Health(False, "KafkaUnreachable", topic.kafka_error, reconciling=True, warning=True), None
    if topic.kafka is None:
        message = f"topic {spec.topic} does not exist in Kafka cluster {cluster}"
        return Health(False, "TopicNotFound", message, stalled=True), None
    problems = refusals(spec.topic, topic.kafka.configs, spec)
    if problems:
        return Health(False, problems[0].reason, "; ".join(p.message for p in problems), stalled=True), None
    leaderless = sorted(p.partition for p in topic.kafka.partitions if p.leader is None)
    by_broker: dict[int, list[int]] = defaultdict(list)
    for p in topic.kafka.partitions:
        if p.leader is not None:
            by_broker[p.leader].append(p.partition)
    missing = sorted(b for b in by_broker if (cluster, b) not in usable)
    if missing:
        names = ", ".join(f"{b} (leads {_list(by_broker[b])})" for b in missing)
        message = f"no usable TieredBroker for broker {names}; copies need the leader's log dir"
        return Health(False, "BrokerNotTiered", message, stalled=True), None
    leaders = _Leaders({b: tuple(sorted(ps)) for b, ps in by_broker.items()})
    if spec.paused:
        return Health(True, "Paused", "paused: no copies, no cleanup"), leaders
    last_copy, last_cleanup = topic.status.last_copy, topic.status.last_cleanup
    table = topic.status.table if spec.table is not None else None
    runs = [(last_copy, "copy", "CopyFailed"), (last_cleanup, "cleanup", "CleanupFailed")]
    if table is not None:
        runs += [
            (table.last_export, "export", "ExportFailed"),
            (table.last_maintenance, "table maintenance", "TableMaintenanceFailed"),
        ]
    for last, what, reason in runs:
        if last is not None and last.result == "Failed":
            return run_failure(reason, what, last), leaders
    if last_copy is None:
        if topic.kafka.empty:
            # Checked and tierable, and no record to copy: Ready now rather than after a Job that would
            # copy nothing (10,000 new topics must not mean 10,000 partitions of empty copy work).
            return Health(True, "Empty", "the topic holds no record yet: nothing to tier"), leaders
        return PENDING, leaders
    lag = topic.status.copy_lag
    lag_text = f"{lag.segments} segments ({lag.bytes} bytes) not yet tiered" if lag else "no lag known"
    remote = topic.status.remote
    tiered = f"{remote.segments} segments ({remote.bytes} bytes) tiered" if remote else "nothing tiered"
    note = f"; partitions {_list(leaderless)} have no leader" if leaderless else ""
    return Health(True, "Tiering", f"{tiered}, {lag_text}{note}"), leaders


def _list(numbers: Sequence[int]) -> str:
    return ",".join(str(n) for n in numbers)


def _event_for(key: str, previous: Sequence[object], health: Health) -> Event | None:
    """A Warning when the resource newly stalls, or newly meets trouble worth one while retried (or either
    for a different reason)."""
    if not (health.stalled or health.warning):
        return None
    kind = STALLED if health.stalled else RECONCILING
    for old in previous:
        if getattr(old, "type", None) == kind and getattr(old, "message", None) == health.message:
            return None
    return Event(key, "Warning", health.reason, health.message)


def plan(
    clusters: Mapping[str, KafkaClusterConfig],
    topics: Sequence[TopicInput],
    brokers: Sequence[BrokerInput],
    running: RunningWork,
    now: datetime.datetime,
) -> Plan:
    result = Plan()
    usable = _usable_brokers(brokers, clusters)
    for broker in brokers:
        health = _broker_health(broker, clusters)
        result.broker_status[broker.key] = broker.status.model_copy(
            update={
                "observed_generation": broker.generation,
                "message": health.message,
                "conditions": conditions_for(health, broker.generation, broker.status.conditions, now),
            }
        )
        event = _event_for(broker.key, broker.status.conditions, health)
        if event is not None:
            result.events.append(event)

    # (cluster, broker id) -> the due partitions it leads, topic by topic.
    copy_work: dict[tuple[str, int], list[TopicPartitions]] = defaultdict(list)
    for topic in topics:
        health, leaders = _topic_verdict(topic, clusters, usable)
        # A table no longer in the spec leaves the status (it stays where it is: never deleted by us).
        dropped = topic.spec is not None and topic.spec.table is None and topic.status.table is not None
        current = topic.status.model_copy(update={"table": None}) if dropped else with_lag(topic.status)
        conditions = conditions_for(health, topic.generation, topic.status.conditions, now)
        held = trim_condition(current.trim_hold, topic.generation, topic.status.conditions, now)
        result.topic_status[topic.key] = current.model_copy(
            update={
                "observed_generation": topic.generation,
                "message": health.message,
                "conditions": conditions if held is None else [*conditions, held],
                "topic_id": topic.kafka.topic_id if topic.kafka is not None else topic.status.topic_id,
            }
        )
        event = _event_for(topic.key, topic.status.conditions, health)
        if event is not None:
            result.events.append(event)
        if held is not None and warns(topic.status.conditions, held):
            result.events.append(Event(topic.key, "Warning", held.reason, held.message))
        spec = topic.spec
        if spec is not None:
            result.topic_cluster[topic.key] = spec.cluster_ref.name
            result.topic_name[topic.key] = spec.topic
        if leaders is None or spec is None or spec.paused:
            continue
        cluster = spec.cluster_ref.name
        empty = topic.kafka is not None and topic.kafka.empty  # nothing to copy yet
        if not empty and copy_due(spec.copy_policy, topic.status.last_copy, now):
            for broker_id, partitions in sorted(leaders.by_broker.items()):
                if (cluster, broker_id) not in running.copy_brokers:
                    copy_work[(cluster, broker_id)].append(TopicPartitions(topic.key, spec.topic, partitions))
        elif not empty:
            result.due_at(copy_due_next(spec.copy_policy, topic.status.last_copy, now), now)
        # Cleanup starts once a copy round has finished: before that there is nothing tiered to trim
        # behind, and a cleanup racing the first copies would spend its interval on nothing. lastCopy is
        # set by the first copy Job recorded, so the first cleanup also waits for the other leaders'.
        first_copies_running = topic.status.last_cleanup is None and any(
            (cluster, b) in running.copy_brokers for b in leaders.by_broker
        )
        if (
            topic.status.last_copy is not None
            and not first_copies_running
            and topic.key not in running.cleanup_topics
            and interval_due(spec.cleanup.interval_seconds, topic.status.last_cleanup, now)
        ):
            result.cleanups.append(CleanupAction(cluster, topic.key, spec.topic, spec))
        elif (
            topic.status.last_copy is not None
            and not first_copies_running
            and topic.key not in running.cleanup_topics
        ):
            result.due_at(interval_due_next(spec.cleanup.interval_seconds, topic.status.last_cleanup), now)
        if spec.table is not None:
            decision = decide_table(spec.table, topic.status, topic.key in running.table_topics, now)
            if decision.action is not None:
                result.tables.append(TableAction(decision.action, cluster, topic.key, spec.topic, spec.table))
            result.due_at(decision.due_at, now)
    for (cluster, broker_id), work in sorted(copy_work.items()):
        broker = usable[(cluster, broker_id)]
        result.copies.append(CopyAction(cluster, broker_id, broker.key, tuple(work)))
    return result
