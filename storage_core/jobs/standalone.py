"""Standalone mode: the operator's reconcile decisions without Kubernetes.

Takes TieredTopic/TieredBroker manifests (log dirs as local paths) and cluster configurations
(:mod:`storage_core.jobs.resource_files` reads them) and runs the operator's round
(:mod:`storage_core.reconcile.round`) with the in-process executor (:mod:`storage_core.jobs.in_process`):
copies from each leader's log dir and cleanups run here, through the same requests and ``jobs``
functions as the operator's Jobs, and their outcomes are folded into the statuses at once.
TieredBrokers with ``replicaFetchers`` get a fetcher proposal
(:mod:`storage_core.jobs.fetcher_changes`); it is applied, each change to its end in the same round, when
``autoApprove`` is set or the caller approves every proposal (``--approve-fetchers``). The statuses live
in memory: a restarted standalone run starts with every topic due.

Before anything else in a round, a TieredBroker with rebuild policy WhenLogDirEmpty gets what its pod's
init container gets on Kubernetes: ``rebuild --if-empty`` on its local log dir (a quick no-op while the
dir holds data or a broker holds its lock; a half-restored dir is completed), reported in status.rebuild.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage_core.adapters.kafka_client_config import ClusterClients, kafka_admin
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import ManifestSet, parse_spec
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.errors import TierkeeperError
from storage_core.jobs.fetcher_changes import BrokerFetchers, FetcherChanges, fetcher_admin
from storage_core.jobs.in_process import InProcessExecutor, remote_store
from storage_core.reconcile.conditions import rfc3339
from storage_core.reconcile.fetchers import broker_conditions, health_of
from storage_core.reconcile.observed import (
    RunningWork,
)
from storage_core.reconcile.planner import CleanupAction, CopyAction, Event, Plan
from storage_core.reconcile.rebuild import RebuildResult, replaces, status_from_result, with_rebuild
from storage_core.reconcile.requests import Request
from storage_core.reconcile.round import (
    KafkaObserver,
    Resource,
    Statuses,
    broker_inputs,
    execute,
    topic_inputs,
)
from storage_core.reconcile.tables import TableAction

Clock = Callable[[], datetime.datetime]


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class RoundReport:
    plan: Plan
    copies: list[CopyAction] = field(default_factory=list)
    cleanups: list[CleanupAction] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    """The requests the round ran: copies, cleanups, exports and table maintenance (fetcher steps: in
    ``fetcher_changes`` outcomes)."""
    tables: list[TableAction] = field(default_factory=list)


class Standalone:
    """One standalone controller: call :meth:`run_round` once (``--once``) or on a timer."""

    def __init__(
        self,
        clusters: Mapping[str, KafkaClusterConfig],
        manifests: ManifestSet,
        *,
        clock: Clock = _utc_now,
        admin_factory: Callable[[str, dict[str, str]], Any] | None = None,
        store_factory: Callable[[KafkaClusterConfig], Any] | None = None,
        fetcher_admin_factory: Callable[[str, dict[str, str]], Any] | None = None,
        approve_fetchers: bool = False,
        kafka_config_dirs: Mapping[str, Path] | None = None,
    ) -> None:
        self.clusters = dict(clusters)
        dirs = dict(kafka_config_dirs or {})
        self._fetcher_admins = ClusterClients(self.clusters, dirs, fetcher_admin_factory or fetcher_admin)
        self._fetchers = FetcherChanges(
            self._fetcher_admins,
            clock,
            clusters=self.clusters,
            config_dirs=dirs,
            steps_per_round=None,
            approve=approve_fetchers,
            how_to_approve="--approve-fetchers or spec.replicaFetchers.autoApprove",
        )
        self.clock = clock
        self._admins = ClusterClients(self.clusters, dirs, admin_factory or kafka_admin)
        self._store_factory = store_factory or remote_store
        self.topics = [o for o in manifests.objects if o.kind == "TieredTopic"]
        self.brokers = [o for o in manifests.objects if o.kind == "TieredBroker"]
        self.topic_specs = {o.key: parse_spec(TieredTopicSpec, o.spec) for o in self.topics}
        self.broker_specs = {o.key: parse_spec(TieredBrokerSpec, o.spec) for o in self.brokers}
        self.topic_status: dict[str, TieredTopicStatus] = {o.key: TieredTopicStatus() for o in self.topics}
        self.broker_status: dict[str, TieredBrokerStatus] = {
            o.key: TieredBrokerStatus() for o in self.brokers
        }
        self._topic_resources = [Resource(o.key, o.generation, self.topic_specs[o.key]) for o in self.topics]
        self._broker_resources = [
            Resource(o.key, o.generation, self.broker_specs[o.key]) for o in self.brokers
        ]
        # Configs read again every round: a poll every few seconds, no 10,000-topic fleet to spare.
        self._observer = KafkaObserver(self._admins, clock, config_max_age=0.0)
        self._executor = InProcessExecutor(
            self.clusters,
            lambda key: self.broker_specs[key].value,
            self._admins,
            self._store_factory,
            dirs,
        )

    # ---- one round ---------------------------------------------------------------------------------
    def run_round(self) -> RoundReport:
        """Rebuild empty log dirs, observe, plan, run every planned action to its end, fold the results in,
        plan the status (:func:`storage_core.reconcile.round.execute`)."""
        before = dict(self.broker_status)
        self._admins.refresh()  # client properties read again from their directories each round
        self._fetcher_admins.refresh()
        self._run_rebuilds()
        self._executor.requests.clear()
        topics = topic_inputs(self._topic_resources, self.topic_status, self.clusters, self._observer)
        brokers = broker_inputs(self._broker_resources, self.broker_status, _platform_problem)
        done = execute(
            self.clusters,
            topics,
            brokers,
            RunningWork(),
            Statuses(self.topic_status, self.broker_status),
            self._executor,
            self.clock,
            self._store,
        )
        report = RoundReport(
            done.plan, done.copies, done.cleanups, done.events, list(self._executor.requests), done.tables
        )
        self._run_fetchers(before, report)
        return report

    def _run_fetchers(self, before: Mapping[str, TieredBrokerStatus], report: RoundReport) -> None:
        """Propose (and, when approved, apply) each managed broker's num.replica.fetchers."""
        items = []
        for obj in self.brokers:
            spec = self.broker_specs[obj.key].value
            if spec is None or spec.replica_fetchers is None or spec.cluster_ref.name not in self.clusters:
                continue
            previous = before[obj.key].fetchers if obj.key in before else None
            items.append(
                BrokerFetchers(
                    obj.key,
                    spec.cluster_ref.name,
                    spec.broker_id,
                    spec.replica_fetchers,
                    previous,
                    paused=spec.paused,
                )
            )
        now = self.clock()
        for key, outcome in self._fetchers.run(items).items():
            status = self.broker_status[key]
            generation = next(o.generation for o in self.brokers if o.key == key)
            old = before[key].conditions if key in before else []
            conditions = broker_conditions(health_of(status), outcome.status, generation, old, now)
            ready = next(c for c in conditions if c.type == "Ready")
            self.broker_status[key] = status.model_copy(
                update={"fetchers": outcome.status, "conditions": conditions, "message": ready.message}
            )
            report.events.extend(Event(key, e.type, e.reason, e.message) for e in outcome.events)

    def _store(self, planned: Plan) -> None:
        self.topic_status.update(planned.topic_status)
        for obj in self.brokers:
            new = planned.broker_status.get(obj.key)
            if new is not None:
                old = self.broker_status[obj.key]
                self.broker_status[obj.key] = with_rebuild(
                    new, old.rebuild, old.conditions, obj.generation, self.clock()
                )

    def _run_rebuilds(self) -> None:
        from storage_core.jobs.rebuild import RebuildOptions, assigned_partitions, rebuild_log_dirs

        for obj in self.brokers:
            spec = self.broker_specs[obj.key].value
            if (
                spec is None
                or spec.paused
                or spec.rebuild.policy != "WhenLogDirEmpty"
                or spec.cluster_ref.name not in self.clusters
            ):
                continue
            cluster = self.clusters[spec.cluster_ref.name]
            options = RebuildOptions(
                broker_id=spec.broker_id, parallelism=spec.rebuild.parallelism, if_empty=True
            )
            start = rfc3339(self.clock())
            try:
                outcome = rebuild_log_dirs(
                    [d.path for d in spec.log_dirs()],
                    self._store_factory(cluster),
                    lambda spec=spec: assigned_partitions(  # type: ignore[misc]
                        self._admins(spec.cluster_ref.name), spec.broker_id, set()
                    ),
                    options,
                )
                result = outcome.result()
            except (TierkeeperError, OSError) as exc:
                result = RebuildResult(failure=str(exc))
            new = status_from_result(result, "Standalone", start=start, end=rfc3339(self.clock()))
            old = self.broker_status[obj.key]
            if replaces(new, old.rebuild):
                self.broker_status[obj.key] = old.model_copy(update={"rebuild": new})


def _platform_problem(spec: TieredBrokerSpec) -> str | None:
    for location in spec.log_dirs():
        if not Path(location.path).is_dir():
            return f"log dir {location.path} is not a directory on this machine"
    return None
