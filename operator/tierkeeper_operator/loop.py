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

from storage_core.adapters.kafka_client_config import ClusterClients
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import parse_spec
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.errors import TierkeeperError
from storage_core.reconcile import outcomes
from storage_core.reconcile.deletion import FINALIZER, SKIP_ANNOTATION, decide_deletion, needs_finalizer
from storage_core.reconcile.observed import (
    BrokerInput,
    KafkaTopic,
    RunningWork,
    TopicConfigs,
    TopicInput,
    kafka_problem,
    observe_topics,
)
from storage_core.reconcile.planner import Plan, plan
from storage_core.reconcile.results import decode_cleanup, decode_copy
from tierkeeper_operator.fetcher_rounds import FetcherRounds
from tierkeeper_operator.jobs import (
    ANNOTATION_CREATED_BY,
    ANNOTATION_RECORDED,
    LABEL_BROKER,
    LABEL_CLUSTER,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_TOPIC,
    MANAGED_BY,
    Owner,
    cleanup_job,
    copy_job,
    delete_job,
    job_state,
    termination_message,
    work_of,
)
from tierkeeper_operator.kube import Kube, KubeError
from tierkeeper_operator.metrics import Metrics
from tierkeeper_operator.rebuild_rounds import RebuildRounds

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
    ) -> None:
        self.kube = kube
        self.identity = identity
        """This replica's peer id, written on the Jobs it creates (empty: not written)."""
        self.clusters = dict(clusters)
        self.metrics = metrics or Metrics()
        self.clock = clock
        # Where each cluster's clientConfigSecretRef Secret is mounted in this pod: the operator reads
        # its own Kafka credentials as files, never through the Secrets API (its RBAC has no secrets).
        dirs = dict(kafka_config_dirs or {})
        self._admins = ClusterClients(self.clusters, dirs, admin_factory or _kafka_admin)
        self._configs: dict[str, TopicConfigs] = {}
        """Per cluster: its topics' configs, re-read only once stale (they are the costliest observation)."""
        self.fetchers = FetcherRounds(kube, self.clusters, clock, self.metrics, kafka_config_dirs=dirs)

    # ---- observe ---------------------------------------------------------------------------------
    def _admin(self, cluster: str) -> Any:
        return self._admins(cluster)

    def _observe(
        self, specs: list[TieredTopicSpec]
    ) -> dict[tuple[str, str], tuple[KafkaTopic | None, str | None]]:
        """Kafka's view of every topic named, by (cluster, topic): a few batched requests per cluster."""
        by_cluster: dict[str, set[str]] = {}
        for spec in specs:
            by_cluster.setdefault(spec.cluster_ref.name, set()).add(spec.topic)
        out: dict[tuple[str, str], tuple[KafkaTopic | None, str | None]] = {}
        for cluster, names in by_cluster.items():
            try:
                configs = self._configs.setdefault(cluster, TopicConfigs())
                answers = observe_topics(self._admin(cluster), names, configs, self.clock().timestamp())
            except TierkeeperError as exc:
                answers = {name: (None, kafka_problem(exc)) for name in names}
            if any(error is not None for _, error in answers.values()):
                self._admins.discard(cluster)  # the next round asks with a fresh client
            out.update({(cluster, name): answer for name, answer in answers.items()})
        return out

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
        failure = None
        if kind == "copy":
            by_topic, problem = decode_copy(message or "")
            if problem is not None:
                failure = f"Job {name} {state.lower()}: {problem}"
            all_rows = [row for rows in by_topic.values() for row in rows]
            for key, topic, _ in work_of(job):
                if key in topics:
                    topics[key] = outcomes.topic_after_copy(
                        topics[key], by_topic.get(topic, []), now, job=name, failure=failure
                    )
            broker_key = broker_keys.get(
                (meta["labels"].get(LABEL_CLUSTER, ""), int(meta["labels"].get(LABEL_BROKER, -1)))
            )
            if broker_key in brokers:
                brokers[broker_key] = outcomes.broker_after_copy(
                    brokers[broker_key], all_rows, now, job=name, failure=failure
                )
        elif kind == "cleanup":
            report, problem = decode_cleanup(message or "")
            if problem is not None:
                failure = f"Job {name} {state.lower()}: {problem}"
            for key, _, _ in work_of(job):
                if key in topics:
                    topics[key] = outcomes.topic_after_cleanup(
                        topics[key], report, now, job=name, failure=failure
                    )
        self.metrics.jobs.labels(kind=kind or "unknown", result=state).inc()
        for key, _, _ in work_of(job):
            obj, status = objects.get(key), topics.get(key)
            outcome = None if status is None else status.last_copy if kind == "copy" else status.last_cleanup
            if obj is not None and outcome is not None:
                failed = outcome.result == "Failed"
                self._event(
                    obj,
                    "TieredTopic",
                    "Warning" if failed else "Normal",
                    f"{(kind or 'job').capitalize()}{outcome.result}",
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
        self._admins.refresh()  # a rotated or newly created Secret is read again each round
        jobs = self.kube.list_jobs(f"{LABEL_MANAGED_BY}={MANAGED_BY}")
        topic_objs = {}
        for obj in self.kube.list_resources("tieredtopics") if only is None else only:
            if not obj["metadata"].get("deletionTimestamp"):
                topic_objs[_key(obj)] = obj
            else:
                self._finalize(obj, jobs)  # being deleted: no new copies or cleanups for it
        topic_specs = {k: parse_spec(TieredTopicSpec, o.get("spec") or {}) for k, o in topic_objs.items()}
        # The finalizer goes on the live objects whose deletion has work to do (deletionPolicy Delete), a few
        # writes at a time; a Retain object needs none, so 10,000 new ones cost no finalizer write.
        missing_finalizer = []
        for key, obj in topic_objs.items():
            live_spec = topic_specs[key].value
            policy = live_spec.deletion_policy if live_spec is not None else None
            if needs_finalizer(policy) and FINALIZER not in (obj["metadata"].get("finalizers") or []):
                missing_finalizer.append(obj)
        self._parallel(
            lambda obj: self._set_finalizers(obj, [*(obj["metadata"].get("finalizers") or []), FINALIZER]),
            missing_finalizer,
        )
        broker_objs = {_key(o): o for o in self.kube.list_resources("tieredbrokers")}
        broker_specs = {k: parse_spec(TieredBrokerSpec, o.get("spec") or {}) for k, o in broker_objs.items()}
        topic_status = {k: _status(TieredTopicStatus, o) for k, o in topic_objs.items()}
        broker_status = {k: _status(TieredBrokerStatus, o) for k, o in broker_objs.items()}
        broker_keys = {
            (p.value.cluster_ref.name, p.value.broker_id): k
            for k, p in broker_specs.items()
            if p.value is not None
        }
        recorded = []
        copy_busy: set[tuple[str, int]] = set()
        cleanup_busy: set[str] = set()
        for job in jobs:
            meta = job["metadata"]
            labels = meta.get("labels") or {}
            if labels.get(LABEL_KIND) in ("delete", "rebuild"):
                continue  # followed by _finalize and by the rebuild rounds
            if job_state(job) == "Running":
                if labels.get(LABEL_KIND) == "copy":
                    copy_busy.add((labels.get(LABEL_CLUSTER, ""), int(labels.get(LABEL_BROKER, -1))))
                else:
                    cleanup_busy.update(key for key, _, _ in work_of(job))
            elif full and (meta.get("annotations") or {}).get(ANNOTATION_RECORDED) != "true":
                # Only a full round: a Job's result concerns topics a quick round may not hold.
                self._record(job, topic_status, broker_status, broker_keys, topic_objs)
                recorded.append(meta["name"])

        observed = self._observe(
            [
                p.value
                for p in topic_specs.values()
                if p.value is not None and p.value.cluster_ref.name in self.clusters
            ]
        )
        topics = []
        for key, obj in topic_objs.items():
            parsed = topic_specs[key]
            kafka, error = None, None
            if parsed.value is not None and parsed.value.cluster_ref.name in self.clusters:
                kafka, error = observed[(parsed.value.cluster_ref.name, parsed.value.topic)]
            generation = obj["metadata"].get("generation")
            topics.append(
                TopicInput(key, generation, parsed.value, parsed.problem, topic_status[key], kafka, error)
            )
        brokers = []
        for key, obj in broker_objs.items():
            parsed_broker = broker_specs[key]
            problem = None
            if parsed_broker.value is not None and parsed_broker.value.log_dir.claim_name is None:
                problem = "logDir.claimName is required on Kubernetes (copy Jobs mount the claim read-only)"
            generation = obj["metadata"].get("generation")
            brokers.append(
                BrokerInput(
                    key, generation, parsed_broker.value, parsed_broker.problem, broker_status[key], problem
                )
            )
        planned = plan(
            self.clusters,
            topics,
            brokers,
            RunningWork(frozenset(copy_busy), frozenset(cleanup_busy)),
            self.clock(),
        )
        if full:
            self.fetchers.run(broker_objs, broker_specs, planned)
        result = RoundResult(plan=planned, recorded=recorded)
        round_key = self.clock().strftime("%Y%m%dT%H%M%S")
        for copy in planned.copies:
            obj = broker_objs[copy.broker_key]
            spec = broker_specs[copy.broker_key].value
            assert spec is not None
            node = spec.placement.node_name
            if node is None and spec.placement.pod_name:
                node = self.kube.pod_node(obj["metadata"]["namespace"], spec.placement.pod_name)
            owner = Owner(
                "TieredBroker", obj["metadata"]["name"], obj["metadata"]["namespace"], obj["metadata"]["uid"]
            )
            job = copy_job(copy, self.clusters[copy.cluster], spec, owner, node, round_key)
            if self._create(job):
                result.created.append(job["metadata"]["name"])
                self._event(
                    obj,
                    "TieredBroker",
                    "Normal",
                    "CopyStarted",
                    f"Job {job['metadata']['name']} copies "
                    f"{sum(len(w.partitions) for w in copy.work)} partitions",
                )
        for cleanup in planned.cleanups:
            obj = topic_objs[cleanup.topic_key]
            owner = Owner(
                "TieredTopic", obj["metadata"]["name"], obj["metadata"]["namespace"], obj["metadata"]["uid"]
            )
            job = cleanup_job(cleanup, self.clusters[cleanup.cluster], owner, round_key)
            if self._create(job):
                result.created.append(job["metadata"]["name"])
                self._event(
                    obj, "TieredTopic", "Normal", "CleanupStarted", f"Job {job['metadata']['name']} started"
                )
        for event in planned.events:
            involved = topic_objs.get(event.key) or broker_objs.get(event.key)
            if involved is not None:
                kind = "TieredTopic" if event.key in topic_objs else "TieredBroker"
                self._event(involved, kind, event.type, event.reason, event.message)
        if full:
            rebuilds = RebuildRounds(self.kube, self.clusters, self._event)
            result.created += rebuilds.run(broker_objs, broker_specs, planned, self.clock())
        changed = []
        for plural, objs, statuses in (
            ("tieredtopics", topic_objs, planned.topic_status),
            ("tieredbrokers", broker_objs, planned.broker_status),
        ):
            for key, status in statuses.items():
                new = status.model_dump(by_alias=True, mode="json", exclude_none=True)
                if new != (objs[key].get("status") or {}):  # only what changed is written
                    meta = objs[key]["metadata"]
                    changed.append((plural, meta["namespace"], meta["name"], new))
        self._parallel(self._patch_status, changed)
        self.metrics.observe_round(planned, (self.clock() - started).total_seconds(), fleet=full)
        return result


def _kafka_admin(bootstrap_servers: str, config: dict[str, str]) -> Any:
    from storage_core.adapters.kafka_admin import KafkaAdmin

    return KafkaAdmin(bootstrap_servers, config)
