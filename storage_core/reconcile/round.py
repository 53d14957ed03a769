"""One reconcile round, written once: observe -> plan -> execute -> fold.

The operator (``tierkeeper_operator.loop``) and standalone mode (``storage_core.jobs.standalone``) both
run a round through this module; they differ only in where the resources and statuses come from (the
Kubernetes API, or manifests and memory) and in their :class:`Executor`:

- observe: :class:`KafkaObserver` asks each cluster about every topic named, in a few batched requests
  (:func:`~storage_core.reconcile.observed.observe_topics`); :func:`topic_inputs` and
  :func:`broker_inputs` make the planner's inputs from the resources and what was observed;
- plan: :func:`~storage_core.reconcile.planner.plan`;
- execute: :func:`execute` hands each planned copy and cleanup to the executor as the request of
  :mod:`storage_core.reconcile.requests`. The Kubernetes executor starts a Job and returns no outcome
  (the Job's result is folded by a later round, from its termination message); the in-process one runs
  the ``jobs`` function and returns the outcome at once, which is folded in and planned again, so a
  cleanup follows the copies it trims behind in the same round;
- fold: :func:`fold_copy` and :func:`fold_cleanup` turn an outcome, from either executor, into statuses
  (:mod:`storage_core.reconcile.outcomes`).

No I/O of its own, so not pure: a round does I/O only through the Kafka clients and the executor it is
handed (the planning it calls is pure).
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import Parsed
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.errors import TierkeeperError
from storage_core.reconcile import outcomes
from storage_core.reconcile.observed import (
    CONFIG_MAX_AGE_S,
    BrokerInput,
    KafkaTopic,
    RunningWork,
    TopicConfigs,
    TopicInput,
    kafka_problem,
    observe_topics,
)
from storage_core.reconcile.planner import CleanupAction, CopyAction, Event, Plan, plan
from storage_core.reconcile.tables import TableAction

Clock = Callable[[], datetime.datetime]
Observation = tuple[KafkaTopic | None, str | None]
"""What Kafka said of one topic: the topic (None: it does not exist), or why it could not be asked."""


class KafkaClients(Protocol):
    """One Kafka Admin client per cluster (``adapters.kafka_client_config.ClusterClients``)."""

    def __call__(self, name: str) -> Any: ...

    def discard(self, name: str) -> None: ...


class KafkaObserver:
    """Kafka's view of the topics a round names, cluster by cluster, with each cluster's topic configs
    trusted for ``config_max_age`` seconds (:class:`~storage_core.reconcile.observed.TopicConfigs`)."""

    def __init__(self, clients: KafkaClients, clock: Clock, config_max_age: float = CONFIG_MAX_AGE_S) -> None:
        self._clients = clients
        self._clock = clock
        self._max_age = config_max_age
        self._configs: dict[str, TopicConfigs] = {}

    def observe(self, specs: Iterable[TieredTopicSpec]) -> dict[tuple[str, str], Observation]:
        """By (cluster, topic): a few batched requests per cluster, whatever the number of topics."""
        by_cluster: dict[str, set[str]] = {}
        for spec in specs:
            by_cluster.setdefault(spec.cluster_ref.name, set()).add(spec.topic)
        out: dict[tuple[str, str], Observation] = {}
        for cluster, names in by_cluster.items():
            try:
                configs = self._configs.setdefault(cluster, TopicConfigs(max_age=self._max_age))
                answers = observe_topics(self._clients(cluster), names, configs, self._clock().timestamp())
            except TierkeeperError as exc:
                answers = {name: (None, kafka_problem(exc)) for name in names}
            if any(error is not None for _, error in answers.values()):
                self._clients.discard(cluster)  # the next round asks with a fresh client
            out.update({(cluster, name): answer for name, answer in answers.items()})
        return out


@dataclass(frozen=True)
class Resource:
    """One TieredTopic or TieredBroker as a round sees it, wherever it was read from."""

    key: str
    generation: int | None
    parsed: Parsed[Any]


def topic_inputs(
    topics: Sequence[Resource],
    statuses: Mapping[str, TieredTopicStatus],
    clusters: Mapping[str, KafkaClusterConfig],
    observer: KafkaObserver | None,
) -> list[TopicInput]:
    """The planner's topic inputs; Kafka is asked about every usable spec (not at all without an
    ``observer``, e.g. when only statuses are re-planned)."""
    specs: list[TieredTopicSpec | None] = [t.parsed.value for t in topics]
    usable = [s for s in specs if s is not None and s.cluster_ref.name in clusters]
    observed = observer.observe(usable) if observer is not None else {}
    out = []
    for topic, spec in zip(topics, specs, strict=True):
        kafka, error = (None, None)
        if spec is not None:
            kafka, error = observed.get((spec.cluster_ref.name, spec.topic), (None, None))
        out.append(
            TopicInput(
                topic.key, topic.generation, spec, topic.parsed.problem, statuses[topic.key], kafka, error
            )
        )
    return out


def broker_inputs(
    brokers: Sequence[Resource],
    statuses: Mapping[str, TieredBrokerStatus],
    platform_problem: Callable[[TieredBrokerSpec], str | None],
) -> list[BrokerInput]:
    """``platform_problem``: why this platform cannot use a valid broker spec (no claim on Kubernetes, no
    such directory on this machine), or None."""
    out = []
    for broker in brokers:
        spec: TieredBrokerSpec | None = broker.parsed.value
        problem = platform_problem(spec) if spec is not None else None
        out.append(
            BrokerInput(
                broker.key, broker.generation, spec, broker.parsed.problem, statuses[broker.key], problem
            )
        )
    return out


# ---- execute and fold ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CopyOutcome:
    """A finished copy: its per-partition rows (``jobs.copy.CopyReport.rows``, or a Job's result decoded)
    and the failure of the run as a whole, if any."""

    rows: Sequence[Mapping[str, Any]] = ()
    failure: str | None = None
    job: str | None = None


@dataclass(frozen=True)
class CleanupOutcome:
    report: Mapping[str, Any] | None = None
    """``jobs.cleanup.run_cleanup``'s report (or a Job's result decoded); None when the run failed."""
    failure: str | None = None
    job: str | None = None


@dataclass(frozen=True)
class TableOutcome:
    report: Mapping[str, Any] | None = None
    """The export's or the maintenance run's ``--json`` summary (or a Job's result decoded); None when
    the run failed."""
    failure: str | None = None
    job: str | None = None


class Executor(Protocol):
    """Carries out a round's actions. An outcome returned is folded in at once; None means the action was
    started and its outcome is folded by a later round (a Kubernetes Job)."""

    def copy(self, action: CopyAction) -> CopyOutcome | None: ...

    def cleanup(self, action: CleanupAction) -> CleanupOutcome | None: ...

    def table(self, action: TableAction) -> TableOutcome | None: ...


@dataclass
class Statuses:
    """The round's statuses by resource key, folded into as outcomes arrive."""

    topics: dict[str, TieredTopicStatus]
    brokers: dict[str, TieredBrokerStatus]

    def keep(self, planned: Plan) -> None:
        """Take a plan's statuses as the current ones."""
        self.topics.update(planned.topic_status)
        self.brokers.update(planned.broker_status)


def fold_copy(
    statuses: Statuses,
    work: Iterable[tuple[str, str]],
    broker_key: str | None,
    outcome: CopyOutcome,
    now: datetime.datetime,
) -> None:
    """Fold a copy's outcome into the statuses of the TieredTopics it worked for (``work``: TieredTopic
    key, topic name) and of the TieredBroker it copied from."""
    run = outcomes.RunEnd(now, outcome.job, outcome.failure)
    by_topic: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in outcome.rows:
        by_topic[str(row["topic"])].append(row)
    for key, topic in work:
        if key in statuses.topics:
            statuses.topics[key] = outcomes.topic_after_copy(
                statuses.topics[key], by_topic.get(topic, []), run
            )
    if broker_key is not None and broker_key in statuses.brokers:
        statuses.brokers[broker_key] = outcomes.broker_after_copy(
            statuses.brokers[broker_key], outcome.rows, run
        )


def fold_cleanup(
    statuses: Statuses, keys: Iterable[str], outcome: CleanupOutcome, now: datetime.datetime
) -> None:
    """Fold a cleanup's outcome into the statuses of the TieredTopics it worked for. Older incarnations of
    a recreated topic are cleaned too; a status is about its current one, so only its rows count."""
    run = outcomes.RunEnd(now, outcome.job, outcome.failure)
    for key in keys:
        status = statuses.topics.get(key)
        if status is None:
            continue
        report = outcome.report
        if report is not None and status.topic_id is not None:
            rows = [p for p in report.get("partitions", []) if p.get("topic_id") in (None, status.topic_id)]
            report = {**report, "partitions": rows}
        statuses.topics[key] = outcomes.topic_after_cleanup(status, report, run)


def fold_table(
    statuses: Statuses, key: str, kind: str, outcome: TableOutcome, now: datetime.datetime
) -> None:
    """Fold an export's (``kind`` "export") or a table maintenance run's (``kind`` "maintain") outcome
    into the TieredTopic's status."""
    status = statuses.topics.get(key)
    if status is None:
        return
    run = outcomes.RunEnd(now, outcome.job, outcome.failure)
    statuses.topics[key] = outcomes.topic_after_table_run(status, kind, outcome.report, run)


@dataclass
class Executed:
    """What a round planned and ran: the last plan (the statuses the round ends with), the actions
    handed to the executor, and every event planned on the way."""

    plan: Plan
    copies: list[CopyAction] = field(default_factory=list)
    cleanups: list[CleanupAction] = field(default_factory=list)
    tables: list[TableAction] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


def execute(
    clusters: Mapping[str, KafkaClusterConfig],
    topics: list[TopicInput],
    brokers: list[BrokerInput],
    running: RunningWork,
    statuses: Statuses,
    executor: Executor,
    clock: Clock,
    keep: Callable[[Plan], None],
) -> Executed:
    """Plan, hand the copies to ``executor``, plan again if any outcome came back (cleanups follow the
    copies they trim behind), hand the cleanups over, plan again, hand the table runs over (an export
    follows the copies it exports), and plan once more for the statuses the round ends with. ``keep``
    stores a plan's statuses into ``statuses`` (the caller may merge in what the planner does not
    decide, e.g. a broker's rebuild)."""

    def replan() -> Plan:
        planned = plan(
            clusters,
            [replace(t, status=statuses.topics[t.key]) for t in topics],
            [replace(b, status=statuses.brokers[b.key]) for b in brokers],
            running,
            clock(),
        )
        keep(planned)
        return planned

    first = plan(clusters, topics, brokers, running, clock())
    keep(first)
    done = Executed(plan=first, events=list(first.events))
    folded = False
    for action in first.copies:
        done.copies.append(action)
        copied = executor.copy(action)
        if copied is not None:
            fold_copy(
                statuses, [(w.topic_key, w.topic) for w in action.work], action.broker_key, copied, clock()
            )
            folded = True
    after_copies = replan() if folded else first
    for cleanup in after_copies.cleanups:
        done.cleanups.append(cleanup)
        cleaned = executor.cleanup(cleanup)
        if cleaned is not None:
            fold_cleanup(statuses, [cleanup.topic_key], cleaned, clock())
            folded = True
    # Exports follow the copies and cleanups of the round: an AfterCopy table sees what they tiered.
    after_cleanups = replan() if folded else after_copies
    folded = False
    for table in after_cleanups.tables:
        done.tables.append(table)
        ran = executor.table(table)
        if ran is not None:
            fold_table(statuses, table.topic_key, table.kind, ran, clock())
            folded = True
    done.plan = replan() if folded else after_cleanups
    done.events.extend(e for e in done.plan.events if e not in done.events)
    return done
