"""The operator's reconcile round on Kubernetes: observe, plan (the shared planner), run Jobs, write status.

One round:
1. list the TieredTopics, TieredBrokers and the Jobs the operator made (by label);
2. fold every finished, not yet recorded Job's result (its pod's termination message) into the statuses
   of the resources it worked for, then mark the Job recorded (an annotation), so a restarted operator
   neither loses nor double-counts a result;
3. running Jobs become :class:`RunningWork`: at most one copy Job per broker and one cleanup Job per topic;
4. observe Kafka (topic, configs, leaders), plan, create the planned Jobs (deterministic names: a Job of
   the same round that exists already is not duplicated), post Events, and patch each status that changed.
The kopf handlers answer create/update at once (spec problems); this round does the rest on a timer.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage_core.adapters.kafka_client_config import ClusterClients, kafka_admin
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import Parsed, parse_spec
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.reconcile.deletion import FINALIZER, SKIP_ANNOTATION, decide_deletion, needs_finalizer
from storage_core.reconcile.observed import RunningWork
from storage_core.reconcile.planner import CleanupAction, CopyAction, Plan
from storage_core.reconcile.results import decode_cleanup, decode_copy, decode_table
from storage_core.reconcile.round import (
    CleanupOutcome,
    CopyOutcome,
    KafkaObserver,
    Resource,
    Statuses,
    TableOutcome,
    broker_inputs,
    execute,
    fold_cleanup,
    fold_copy,
    fold_table,
    topic_inputs,
)
from storage_core.reconcile.tables import TableAction
from storage_core.reconcile.tiered_clusters import admitted
from tierkeeper_operator.cluster_rounds import ClusterRounds, LiveClusters
from tierkeeper_operator.fetcher_rounds import FetcherRounds
from tierkeeper_operator.gateway_objects import GatewaySettings
from tierkeeper_operator.jobs import (
    ANNOTATION_CREATED_BY,
    ANNOTATION_RECORDED,
    BUCKET_CHECK,
    LABEL_BROKER,
    LABEL_CLUSTER,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_TOPIC,
    MANAGED_BY,
    TABLE_JOB_KINDS,
    Owner,
    cleanup_job,
    copy_job,
    delete_job,
    job_state,
    table_job,
    termination_message,
    tier_writers,
    work_of,
)
from tierkeeper_operator.kube import Kube, KubeError
from tierkeeper_operator.metrics import Metrics
from tierkeeper_operator.rebuild_rounds import RebuildRounds
from tierkeeper_operator.status_patch import status_patch

log = logging.getLogger("tierkeeper.operator")
COMPONENT = "tierkeeper-operator"
PATCH_WORKERS = 8  # concurrent status writes; the API server is shared, so a few, not hundreds


def _key(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def _status(model: type[Any], obj: Mapping[str, Any]) -> Any:
    try:
        return model.model_validate(obj.get("status") or {})
    except ValueError:
        return model()  # a status another writer broke is rebuilt, not fatal


@dataclass
class RoundResult:
    plan: Plan
    created: list[str] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        clusters: Mapping[str, KafkaClusterConfig],
        *,
        admin_factory: Callable[[str, dict[str, str]], Any] | None = None,
        kafka_config_dirs: Mapping[str, Path] | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        identity: str = "",
        gateway_settings: GatewaySettings | None = None,
    ) -> None:
        self.kube = kube
        self.identity = identity
        """This replica's peer id, written on the Jobs it creates (empty: not written)."""
        # The clusters in effect: the file entries (``clusters``) and the TieredClusters, swapped whole by
        # every full round (cluster_rounds), so a new, edited or deleted TieredCluster needs no restart.
        self.clusters = LiveClusters(clusters)
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.cluster_rounds = ClusterRounds(
            kube, clusters, self.clusters, clock, self._event, self._create, gateway_settings
        )
        # A file entry's clientConfigSecretRef Secret is mounted in this pod (read as files); a
        # TieredCluster's is read by name, with `get` on exactly the Secrets granted (cluster_rounds).
        dirs = dict(kafka_config_dirs or {})
        self._admins = ClusterClients(
            self.clusters, dirs, admin_factory or kafka_admin, self.cluster_rounds.secret_for
        )
        self._observer = KafkaObserver(self._admins, clock)
        """Per cluster: its topics' configs are re-read only once stale (the costliest observation)."""
        self.fetchers = FetcherRounds(
            kube,
            self.clusters,
            clock,
            self.metrics,
            kafka_config_dirs=dirs,
            secret_reader=self.cluster_rounds.secret_for,
        )

    # ---- results of finished Jobs -------------------------------------------------------------------
    def _record(
        self,
        job: Mapping[str, Any],
        topics: dict[str, TieredTopicStatus],
        brokers: dict[str, TieredBrokerStatus],
        broker_keys: Mapping[tuple[str, int], str],
        objects: Mapping[str, Mapping[str, Any]],
    ) -> None:
        meta = job["metadata"]
        kind = meta["labels"].get(LABEL_KIND)
        state = job_state(job)
        message = termination_message(self.kube.job_pods(meta["namespace"], meta["name"]))
        now = self.clock()
        name = meta["name"]
        # A readable result speaks for itself (per-partition errors); without one the whole run failed.
        statuses = Statuses(topics, brokers)
        work = [(key, topic) for key, topic, _ in work_of(job)]
        if kind == "copy":
            by_topic, problem = decode_copy(message or "")
            failure = None if problem is None else f"Job {name} {state.lower()}: {problem}"
            rows = [row for rows in by_topic.values() for row in rows]
            broker_key = broker_keys.get(
                (meta["labels"].get(LABEL_CLUSTER, ""), int(meta["labels"].get(LABEL_BROKER, -1)))
            )
            fold_copy(statuses, work, broker_key, CopyOutcome(rows, failure, name), now)
        elif kind == "cleanup":
            report, problem = decode_cleanup(message or "")
            failure = None if problem is None else f"Job {name} {state.lower()}: {problem}"
            fold_cleanup(statuses, [key for key, _ in work], CleanupOutcome(report, failure, name), now)
        elif kind in _TABLE_KINDS:
            table_kind = _TABLE_KINDS[kind]
            report, problem = decode_table(table_kind, message or "")
            failure = None if problem is None else f"Job {name} {state.lower()}: {problem}"
            for key, _ in work:
                fold_table(statuses, key, table_kind, TableOutcome(report, failure, name), now)
        self.metrics.jobs.labels(kind=kind or "unknown", result=state).inc()
        for key, _, _ in work_of(job):
            obj, status = objects.get(key), topics.get(key)
            outcome = None if status is None else _last_run(status, kind)
            if obj is not None and outcome is not None:
                failed = outcome.result == "Failed"
                self._event(
                    obj,
                    "TieredTopic",
                    "Warning" if failed else "Normal",
                    f"{(kind or 'job').title().replace('-', '')}{outcome.result}",
                    f"Job {name}: {outcome.message}",
                )
        self.kube.annotate_job(meta["namespace"], name, {ANNOTATION_RECORDED: "true"})

    def _set_finalizers(self, obj: Mapping[str, Any], finalizers: list[str]) -> bool:
        """False when the object changed since it was listed (409: kopf or a user wrote it meanwhile) or
        is gone (404): the next round, with the object as it is then, tries again. Nothing else of this
        round depends on it, so the round goes on for every other object."""
        try:
            self.kube.set_finalizers("tieredtopics", obj, finalizers)
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise
            log.debug("finalizers of %s not written this round: HTTP %s", _key(obj), exc.status)
            return False
        return True

    def _finalize(self, obj: Mapping[str, Any], jobs: list[dict[str, Any]]) -> None:
        """Carry out a deleted TieredTopic's deletionPolicy (live ones get the finalizer in run_round)."""
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        spec = parse_spec(TieredTopicSpec, obj.get("spec") or {}).value
        status = _status(TieredTopicStatus, obj)
        mine = [
            j
            for j in jobs
            if (j["metadata"].get("labels") or {}).get(LABEL_KIND) == "delete"
            and j["metadata"]["namespace"] == meta["namespace"]
            and (j["metadata"].get("labels") or {}).get(LABEL_TOPIC) == meta["name"]
        ]
        states = [job_state(j) for j in sorted(mine, key=lambda j: j["metadata"]["creationTimestamp"])]
        last = "none" if not states else "running" if "Running" in states else states[-1].lower()
        skip = (meta.get("annotations") or {}).get(SKIP_ANNOTATION) == "true"
        decision = decide_deletion(
            spec.deletion_policy if spec else None,
            skip,
            status.topic_id,
            last,  # type: ignore[arg-type]
            writers=tier_writers(jobs, _key(obj)),
        )
        if decision.step == "release":
            if self._set_finalizers(obj, [f for f in finalizers if f != FINALIZER]):
                self._event(obj, "TieredTopic", "Normal", "Released", decision.reason)
        elif decision.step == "start-delete" and spec is not None and status.topic_id is not None:
            cluster = self.clusters.get(spec.cluster_ref.name)
            if cluster is None:
                self._event(
                    obj, "TieredTopic", "Warning", "ClusterNotFound", f"cannot delete: {decision.reason}"
                )
                return
            owner = Owner("TieredTopic", meta["name"], meta["namespace"], meta["uid"])
            job = delete_job(
                spec.topic,
                status.topic_id,
                spec.cluster_ref.name,
                cluster,
                owner,
                self.clock().strftime("%Y%m%dT%H%M%S"),
            )
            try:
                created = self._create(job)
            except KubeError as exc:
                # E.g. 403 in a namespace being deleted: no new object may be created there, so this
                # delete can never start. The object waits for the way out (the skip annotation);
                # the round goes on for everything else.
                log.warning("cannot start the delete Job of %s: %s", _key(obj), exc)
                self._event(obj, "TieredTopic", "Warning", "DeleteNotStarted", f"{exc}"[:300])
                return
            if created:
                self._event(
                    obj,
                    "TieredTopic",
                    "Normal",
                    "DeleteStarted",
                    f"Job {job['metadata']['name']}: {decision.reason}",
                )

    def _create(self, job: dict[str, Any]) -> bool:
        """Create ``job`` stamped with this replica's id; False when it exists already."""
        if self.identity:
            job["metadata"].setdefault("annotations", {})[ANNOTATION_CREATED_BY] = self.identity
        created: bool = self.kube.create_job(job)
        if created:
            self.metrics.jobs_started.labels(kind=job["metadata"]["labels"][LABEL_KIND]).inc()
        return created

    def _parallel(self, action: Callable[[Any], Any], items: list[Any]) -> None:
        """Run ``action`` on every item, a few at a time: after 10,000 TieredTopics are created, the first
        round has 10,000 finalizers and statuses to write, and one at a time each waits a full API round
        trip. The first failure fails the round, as a sequential loop would."""
        if len(items) <= 1:
            for item in items:
                action(item)
            return
        with ThreadPoolExecutor(max_workers=PATCH_WORKERS, thread_name_prefix="tierkeeper-write") as pool:
            for future in [pool.submit(action, item) for item in items]:
                future.result()

    def _patch_status(self, item: tuple[str, str, str, dict[str, Any]]) -> None:
        try:
            self.kube.patch_status(*item)
        except KubeError as exc:
            if exc.status != 404:  # deleted during the round
                raise

    def _event(self, obj: Mapping[str, Any], kind: str, type_: str, reason: str, message: str) -> None:
        try:
            self.kube.event(obj, kind, type_, reason, message, COMPONENT)
        except KubeError as exc:
            log.warning("could not post event %s on %s: %s", reason, _key(obj), exc)

    # ---- one round ---------------------------------------------------------------------------------
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
        self._admins.refresh()  # a rotated or newly created Secret is read again each round
        listed = self._list(only)
        self._add_finalizers(listed)
        running, recorded = self._fold_finished_jobs(listed, full)
        executed = self._plan_and_start(listed, running)
        planned = executed.plan
        if full:
            self.fetchers.run(listed.broker_objs, listed.broker_specs, planned)
        self._post_events(listed, planned)
        result = RoundResult(plan=planned, created=executed.created, recorded=recorded)
        if full:
            rebuilds = RebuildRounds(self.kube, self.clusters, self._event)
            result.created += rebuilds.run(listed.broker_objs, listed.broker_specs, planned, self.clock())
        self._write_statuses(listed, planned)
        if full:
            result.created += self.cluster_rounds.finish(
                listed.jobs,
                listed.topic_specs,
                listed.broker_specs,
                planned.topic_status,
                planned.broker_status,
                self._admins,
            )
        self.metrics.observe_round(planned, (self.clock() - started).total_seconds(), fleet=full)
        return result

    def _list(self, only: list[dict[str, Any]] | None) -> _Listed:
        """Observe Kubernetes: the operator's Jobs, the TieredTopics (or ``only`` those) and TieredBrokers,
        their parsed specs and current statuses; a TieredTopic being deleted gets its deletionPolicy
        carried out instead (no new copies or cleanups for it)."""
        jobs = self.kube.list_jobs(f"{LABEL_MANAGED_BY}={MANAGED_BY}")
        topic_objs = {}
        for obj in self.kube.list_resources("tieredtopics") if only is None else only:
            if not obj["metadata"].get("deletionTimestamp"):
                topic_objs[_key(obj)] = obj
            else:
                self._finalize(obj, jobs)
        broker_objs = {_key(o): o for o in self.kube.list_resources("tieredbrokers")}
        where = self.cluster_rounds.directory
        # A clusterRef naming a TieredCluster of another namespace is refused here, before the planner.
        return _Listed(
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
                {k: _status(TieredTopicStatus, o) for k, o in topic_objs.items()},
                {k: _status(TieredBrokerStatus, o) for k, o in broker_objs.items()},
            ),
        )

    def _add_finalizers(self, listed: _Listed) -> None:
        """The finalizer goes on the live objects whose deletion has work to do (deletionPolicy Delete), a
        few writes at a time; a Retain object needs none, so 10,000 new ones cost no finalizer write."""
        missing = []
        for key, obj in listed.topic_objs.items():
            live_spec = listed.topic_specs[key].value
            policy = live_spec.deletion_policy if live_spec is not None else None
            if needs_finalizer(policy) and FINALIZER not in (obj["metadata"].get("finalizers") or []):
                missing.append(obj)
        self._parallel(
            lambda obj: self._set_finalizers(obj, [*(obj["metadata"].get("finalizers") or []), FINALIZER]),
            missing,
        )

    def _fold_finished_jobs(self, listed: _Listed, full: bool) -> tuple[RunningWork, list[str]]:
        """Running copy and cleanup Jobs become :class:`RunningWork`; in a full round, every finished,
        unrecorded one is folded into the statuses (a quick round may not hold the topics it concerns)."""
        broker_keys = {
            (p.value.cluster_ref.name, p.value.broker_id): k
            for k, p in listed.broker_specs.items()
            if p.value is not None
        }
        recorded = []
        copy_busy: set[tuple[str, int]] = set()
        cleanup_busy: set[str] = set()
        table_busy: set[str] = set()
        for job in listed.jobs:
            meta = job["metadata"]
            labels = meta.get("labels") or {}
            if labels.get(LABEL_KIND) in ("delete", "rebuild", BUCKET_CHECK):
                continue  # followed by _finalize, the rebuild rounds and the cluster rounds
            if job_state(job) == "Running":
                if labels.get(LABEL_KIND) == "copy":
                    copy_busy.add((labels.get(LABEL_CLUSTER, ""), int(labels.get(LABEL_BROKER, -1))))
                elif labels.get(LABEL_KIND) in _TABLE_KINDS:
                    table_busy.update(key for key, _, _ in work_of(job))
                else:
                    cleanup_busy.update(key for key, _, _ in work_of(job))
            elif full and (meta.get("annotations") or {}).get(ANNOTATION_RECORDED) != "true":
                self._record(
                    job, listed.statuses.topics, listed.statuses.brokers, broker_keys, listed.topic_objs
                )
                recorded.append(meta["name"])
        return RunningWork(frozenset(copy_busy), frozenset(cleanup_busy), frozenset(table_busy)), recorded

    def _plan_and_start(self, listed: _Listed, running: RunningWork) -> _Started:
        """Observe Kafka, plan, and start the planned copy and cleanup Jobs
        (:func:`storage_core.reconcile.round.execute` with the Job executor)."""
        topics = topic_inputs(
            [
                Resource(k, o["metadata"].get("generation"), listed.topic_specs[k])
                for k, o in listed.topic_objs.items()
            ],
            listed.statuses.topics,
            self.clusters,
            self._observer,
        )
        brokers = broker_inputs(
            [
                Resource(k, o["metadata"].get("generation"), listed.broker_specs[k])
                for k, o in listed.broker_objs.items()
            ],
            listed.statuses.brokers,
            _platform_problem,
        )
        starter = JobStarter(self, listed, self.clock().strftime("%Y%m%dT%H%M%S"))
        executed = execute(
            self.clusters,
            topics,
            brokers,
            running,
            listed.statuses,
            starter,
            self.clock,
            listed.statuses.keep,
        )
        return _Started(executed.plan, starter.created)

    def _post_events(self, listed: _Listed, planned: Plan) -> None:
        for event in planned.events:
            involved = listed.topic_objs.get(event.key) or listed.broker_objs.get(event.key)
            if involved is not None:
                kind = "TieredTopic" if event.key in listed.topic_objs else "TieredBroker"
                self._event(involved, kind, event.type, event.reason, event.message)

    def _write_statuses(self, listed: _Listed, planned: Plan) -> None:
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
        self._parallel(self._patch_status, changed)


@dataclass
class _Listed:
    """What a round read from the API server."""

    jobs: list[dict[str, Any]]
    topic_objs: dict[str, dict[str, Any]]
    broker_objs: dict[str, dict[str, Any]]
    topic_specs: dict[str, Parsed[TieredTopicSpec]]
    broker_specs: dict[str, Parsed[TieredBrokerSpec]]
    statuses: Statuses


@dataclass
class _Started:
    plan: Plan
    created: list[str]


def _platform_problem(spec: TieredBrokerSpec) -> str | None:
    if spec.log_dir.claim_name is None:
        return "logDir.claimName is required on Kubernetes (copy Jobs mount the claim read-only)"
    return None


class JobStarter:
    """The Kubernetes executor of a round: each planned action becomes its request's Job (deterministic
    names per round: a Job of the same round that exists already is not duplicated) and an Event; the
    outcome comes later, from the Job's termination message (``Reconciler._record``)."""

    def __init__(self, reconciler: Reconciler, listed: _Listed, round_key: str) -> None:
        self._r = reconciler
        self._listed = listed
        self._round_key = round_key
        self.created: list[str] = []

    def copy(self, action: CopyAction) -> None:
        obj = self._listed.broker_objs[action.broker_key]
        spec = self._listed.broker_specs[action.broker_key].value
        assert spec is not None
        node = spec.placement.node_name
        if node is None and spec.placement.pod_name:
            node = self._r.kube.pod_node(obj["metadata"]["namespace"], spec.placement.pod_name)
        job = copy_job(
            action, self._r.clusters[action.cluster], spec, _owner("TieredBroker", obj), node, self._round_key
        )
        if self._r._create(job):
            self.created.append(job["metadata"]["name"])
            partitions = sum(len(w.partitions) for w in action.work)
            message = f"Job {job['metadata']['name']} copies {partitions} partitions"
            self._r._event(obj, "TieredBroker", "Normal", "CopyStarted", message)

    def cleanup(self, action: CleanupAction) -> None:
        obj = self._listed.topic_objs[action.topic_key]
        job = cleanup_job(
            action, self._r.clusters[action.cluster], _owner("TieredTopic", obj), self._round_key
        )
        if self._r._create(job):
            self.created.append(job["metadata"]["name"])
            message = f"Job {job['metadata']['name']} started"
            self._r._event(obj, "TieredTopic", "Normal", "CleanupStarted", message)

    def table(self, action: TableAction) -> None:
        obj = self._listed.topic_objs[action.topic_key]
        job = table_job(action, self._r.clusters[action.cluster], _owner("TieredTopic", obj), self._round_key)
        if self._r._create(job):
            self.created.append(job["metadata"]["name"])
            reason = "ExportStarted" if action.kind == "export" else "TableMaintenanceStarted"
            self._r._event(obj, "TieredTopic", "Normal", reason, f"Job {job['metadata']['name']} started")


_TABLE_KINDS = {label: kind for kind, label in TABLE_JOB_KINDS.items()}
"""TableAction.kind by job-kind label."""


def _last_run(status: TieredTopicStatus, kind: str | None) -> Any:
    """The status's outcome of the last run of a Job of ``kind``."""
    if kind == "copy":
        return status.last_copy
    if kind == "cleanup":
        return status.last_cleanup
    if kind in _TABLE_KINDS and status.table is not None:
        return status.table.last_export if kind == "export" else status.table.last_maintenance
    return None


def _owner(kind: str, obj: Mapping[str, Any]) -> Owner:
    meta = obj["metadata"]
    return Owner(kind, meta["name"], meta["namespace"], meta["uid"])
