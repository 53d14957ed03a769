"""The operator's reconcile round on Kubernetes: observe, plan (the shared planner), run Jobs, write status.

:meth:`Reconciler.run_round` is the loop of DESIGN.md, one phase per step; each phase's work is a
collaborator built once by the composition root (:mod:`.compose`). The kopf handlers answer
create/update at once (spec problems); this round does the rest on a timer and when woken.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from storage_core.adapters.kafka_client_config import ClusterClients
from storage_core.api.parse import parse_spec
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.reconcile.observed import RunningWork
from storage_core.reconcile.planner import Plan
from storage_core.reconcile.round import (
    KafkaObserver,
    Resource,
    Statuses,
    broker_inputs,
    execute,
    topic_inputs,
)
from storage_core.reconcile.tiered_clusters import admitted
from tierkeeper_operator.cluster_rounds import ClusterRounds
from tierkeeper_operator.deletion import Deletion
from tierkeeper_operator.fetcher_rounds import FetcherRounds
from tierkeeper_operator.job_results import JobResults
from tierkeeper_operator.job_starter import JobStarter
from tierkeeper_operator.jobs import LABEL_MANAGED_BY, MANAGED_BY
from tierkeeper_operator.kube import Kube, KubeError
from tierkeeper_operator.listing import Listed, status_of
from tierkeeper_operator.live_clusters import LiveClusters
from tierkeeper_operator.metrics import Metrics
from tierkeeper_operator.rebuild_rounds import RebuildRounds
from tierkeeper_operator.status_patch import status_patch
from tierkeeper_operator.writes import EventSink, key_of, parallel, post_events


@dataclass
class RoundResult:
    plan: Plan
    created: list[str] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Reconciler:
    """One operator's rounds, over the collaborators :func:`.compose.build_reconciler` built once."""

    kube: Kube
    clusters: LiveClusters
    """The clusters in effect: the file entries and the TieredClusters, swapped whole by every full round
    (:meth:`ClusterRounds.resolve`), so a new, edited or deleted TieredCluster needs no restart."""
    metrics: Metrics
    clock: Callable[[], datetime.datetime]
    event: EventSink
    kafka: ClusterClients[Any]
    """The operator's own Kafka clients, one per cluster (re-read each round: rotated Secrets)."""
    observer: KafkaObserver
    """Per cluster: its topics' configs are re-read only once stale (the costliest observation)."""
    cluster_rounds: ClusterRounds
    deletion: Deletion
    results: JobResults
    starter: JobStarter
    fetchers: FetcherRounds
    rebuilds: RebuildRounds

    def run_round(self, only: list[dict[str, Any]] | None = None) -> RoundResult:
        """One round over every TieredTopic (listed), or, with ``only``, a quick round over just those
        objects (as a watch delivered them: new, edited or being deleted; :mod:`.wakeups`). A quick round
        observes Kafka for those topics alone, creates the Jobs they are due and writes their status; it
        leaves finished Jobs' results, fetcher proposals, rebuilds and the fleet-wide gauges to the full
        rounds, which see every object the results and gauges are about."""
        started = self.clock()
        full = only is None
        if full:
            self.cluster_rounds.resolve()  # TieredClusters created, edited or deleted take effect here
        self.kafka.refresh()  # a rotated or newly created Secret is read again each round
        listed = self._list(only)
        self.deletion.add_finalizers(listed)
        running, recorded = self.results.take(listed, full)
        planned, created = self._plan_and_start(listed, running)
        if full:
            self.fetchers.run(listed.broker_objs, listed.broker_specs, planned)
        post_events(self.event, listed, planned.events)
        result = RoundResult(plan=planned, created=created, recorded=recorded)
        if full:
            result.created += self.rebuilds.run(
                listed.broker_objs, listed.broker_specs, planned, self.clock()
            )
        self._write_statuses(listed, planned)
        if full:
            result.created += self.cluster_rounds.finish(
                listed.jobs,
                listed.topic_specs,
                listed.broker_specs,
                planned.topic_status,
                planned.broker_status,
                self.kafka,
            )
        self.metrics.observe_round(planned, (self.clock() - started).total_seconds(), fleet=full)
        return result

    def _list(self, only: list[dict[str, Any]] | None) -> Listed:
        """Observe Kubernetes: the operator's Jobs, the TieredTopics (or ``only`` those) and TieredBrokers,
        their parsed specs and current statuses; a TieredTopic being deleted gets its deletionPolicy
        carried out instead (no new copies or cleanups for it)."""
        jobs = self.kube.list_jobs(f"{LABEL_MANAGED_BY}={MANAGED_BY}")
        topic_objs = {}
        for obj in self.kube.list_resources("tieredtopics") if only is None else only:
            if not obj["metadata"].get("deletionTimestamp"):
                topic_objs[key_of(obj)] = obj
            else:
                self.deletion.finalize(obj, jobs)
        broker_objs = {key_of(o): o for o in self.kube.list_resources("tieredbrokers")}
        where = self.cluster_rounds.directory
        # A clusterRef naming a TieredCluster of another namespace is refused here, before the planner.
        return Listed(
            jobs=jobs,
            topic_objs=topic_objs,
            broker_objs=broker_objs,
            topic_specs={
                k: admitted(
                    o["metadata"]["namespace"], parse_spec(TieredTopicSpec, o.get("spec") or {}), where
                )
                for k, o in topic_objs.items()
            },
            broker_specs={
                k: admitted(
                    o["metadata"]["namespace"], parse_spec(TieredBrokerSpec, o.get("spec") or {}), where
                )
                for k, o in broker_objs.items()
            },
            statuses=Statuses(
                {k: status_of(TieredTopicStatus, o) for k, o in topic_objs.items()},
                {k: status_of(TieredBrokerStatus, o) for k, o in broker_objs.items()},
            ),
        )

    def _plan_and_start(self, listed: Listed, running: RunningWork) -> tuple[Plan, list[str]]:
        """Observe Kafka, plan, and start the planned copy, cleanup and table Jobs
        (:func:`storage_core.reconcile.round.execute` with the Job executor); the plan and the Jobs
        created."""
        topics = topic_inputs(
            [
                Resource(k, o["metadata"].get("generation"), listed.topic_specs[k])
                for k, o in listed.topic_objs.items()
            ],
            listed.statuses.topics,
            self.clusters,
            self.observer,
        )
        brokers = broker_inputs(
            [
                Resource(k, o["metadata"].get("generation"), listed.broker_specs[k])
                for k, o in listed.broker_objs.items()
            ],
            listed.statuses.brokers,
            _platform_problem,
        )
        jobs = self.starter.bind(listed, self.clock().strftime("%Y%m%dT%H%M%S"))
        executed = execute(
            self.clusters, topics, brokers, running, listed.statuses, jobs, self.clock, listed.statuses.keep
        )
        return executed.plan, jobs.created

    def _write_statuses(self, listed: Listed, planned: Plan) -> None:
        """Patch each status that changed, a few at a time (written once, at the end of the round)."""
        changed = []
        for plural, objs, statuses in (
            ("tieredtopics", listed.topic_objs, planned.topic_status),
            ("tieredbrokers", listed.broker_objs, planned.broker_status),
        ):
            for key, status in statuses.items():
                new = status.model_dump(by_alias=True, mode="json", exclude_none=True)
                patch = status_patch(objs[key].get("status") or {}, new)  # only what changed is written
                if patch:
                    meta = objs[key]["metadata"]
                    changed.append((plural, meta["namespace"], meta["name"], patch))
        parallel(self._patch_status, changed)

    def _patch_status(self, item: tuple[str, str, str, dict[str, Any]]) -> None:
        try:
            self.kube.patch_status(*item)
        except KubeError as exc:
            if exc.status != 404:  # deleted during the round
                raise


def _platform_problem(spec: TieredBrokerSpec) -> str | None:
    if spec.log_dir.claim_name is None:
        return "logDir.claimName is required on Kubernetes (copy Jobs mount the claim read-only)"
    return None
