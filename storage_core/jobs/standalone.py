"""Standalone mode: the operator's reconcile decisions without Kubernetes.

Reads TieredTopic/TieredBroker manifests (log dirs as local paths) and cluster configurations, observes
Kafka through the Admin API, runs :func:`storage_core.reconcile.planner.plan`, executes its actions in
this process with the storage core (copy from each leader's log dir, cleanup with the local trim), folds
each run's result into the statuses with :mod:`storage_core.reconcile.outcomes`, and plans again for the
status to show. The statuses live in memory: a restarted standalone run starts with every topic due.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import ManifestSet, parse_cluster_config, parse_manifests, parse_spec
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.errors import ConfigError, TierkeeperError
from storage_core.reconcile import outcomes
from storage_core.reconcile.observed import (
    BrokerInput,
    KafkaTopic,
    RunningWork,
    TopicInput,
    observe_topics,
)
from storage_core.reconcile.planner import CleanupAction, CopyAction, Event, Plan, plan

Clock = Callable[[], datetime.datetime]


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def load_clusters(paths: Sequence[Path], *, secrets_allowed: bool = False) -> dict[str, KafkaClusterConfig]:
    """Cluster configurations by name from YAML files. ``secrets_allowed``: the operator resolves Secret
    references in Jobs; standalone mode cannot, and refuses them rather than run without credentials."""
    clusters: dict[str, KafkaClusterConfig] = {}
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read cluster configuration {path}: {exc.strerror}") from None
        for cluster in parse_cluster_config(text, str(path)):
            if cluster.name in clusters:
                raise ConfigError(f"{path}: cluster {cluster.name!r} is defined twice")
            if not secrets_allowed and (
                cluster.client_config_secret_ref or cluster.remote.storage_options_secret_ref
            ):
                raise ConfigError(
                    f"{path}: cluster {cluster.name!r} references a Secret; standalone mode reads no "
                    "Secrets (put the values in clientConfig / remote.storageOptions, or use the "
                    "storage provider's environment)"
                )
            clusters[cluster.name] = cluster
    return clusters


def load_manifests(directory: Path) -> ManifestSet:
    if not directory.is_dir():
        raise ConfigError(f"--manifests {directory}: not a directory")
    out = ManifestSet()
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        parse_manifests(path.read_text(encoding="utf-8"), str(path), out)
    keys = [(o.kind, o.key) for o in out.objects]
    duplicates = sorted({f"{kind} {key}" for kind, key in keys if keys.count((kind, key)) > 1})
    if duplicates:
        raise ConfigError(f"{directory}: defined more than once: {', '.join(duplicates)}")
    return out


@dataclass
class RoundReport:
    plan: Plan
    copies: list[CopyAction] = field(default_factory=list)
    cleanups: list[CleanupAction] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


class Standalone:
    """One standalone controller: call :meth:`run_round` once (``--once``) or on a timer."""

    def __init__(
        self,
        clusters: Mapping[str, KafkaClusterConfig],
        manifests: ManifestSet,
        *,
        clock: Clock = _utc_now,
        admin_factory: Callable[[KafkaClusterConfig], Any] | None = None,
        store_factory: Callable[[KafkaClusterConfig], Any] | None = None,
    ) -> None:
        self.clusters = dict(clusters)
        self.clock = clock
        self._admin_factory = admin_factory or _kafka_admin
        self._store_factory = store_factory or _remote_store
        self._admins: dict[str, Any] = {}
        self.topics = [o for o in manifests.objects if o.kind == "TieredTopic"]
        self.brokers = [o for o in manifests.objects if o.kind == "TieredBroker"]
        self.topic_specs = {o.key: parse_spec(TieredTopicSpec, o.spec) for o in self.topics}
        self.broker_specs = {o.key: parse_spec(TieredBrokerSpec, o.spec) for o in self.brokers}
        self.topic_status: dict[str, TieredTopicStatus] = {o.key: TieredTopicStatus() for o in self.topics}
        self.broker_status: dict[str, TieredBrokerStatus] = {
            o.key: TieredBrokerStatus() for o in self.brokers
        }

    # ---- observe ---------------------------------------------------------------------------------
    def _admin(self, cluster: str) -> Any:
        if cluster not in self._admins:
            self._admins[cluster] = self._admin_factory(self.clusters[cluster])
        return self._admins[cluster]

    def _observe_topic(self, spec: TieredTopicSpec) -> tuple[KafkaTopic | None, str | None]:
        try:
            admin = self._admin(spec.cluster_ref.name)
        except TierkeeperError as exc:
            return None, str(exc)
        return observe_topics(admin, [spec.topic])[spec.topic]

    def _inputs(self, observe: bool) -> tuple[list[TopicInput], list[BrokerInput]]:
        topics = []
        for obj in self.topics:
            parsed = self.topic_specs[obj.key]
            kafka, error = None, None
            if observe and parsed.value is not None and parsed.value.cluster_ref.name in self.clusters:
                kafka, error = self._observe_topic(parsed.value)
            topics.append(
                TopicInput(
                    obj.key,
                    obj.generation,
                    parsed.value,
                    parsed.problem,
                    self.topic_status[obj.key],
                    kafka,
                    error,
                )
            )
        brokers = []
        for obj in self.brokers:
            parsed_broker = self.broker_specs[obj.key]
            problem = None
            if parsed_broker.value is not None and not Path(parsed_broker.value.log_dir.path).is_dir():
                problem = f"log dir {parsed_broker.value.log_dir.path} is not a directory on this machine"
            brokers.append(
                BrokerInput(
                    obj.key,
                    obj.generation,
                    parsed_broker.value,
                    parsed_broker.problem,
                    self.broker_status[obj.key],
                    problem_on_platform=problem,
                )
            )
        return topics, brokers

    # ---- one round ---------------------------------------------------------------------------------
    def run_round(self) -> RoundReport:
        """Observe, plan, run every planned action to its end, fold the results in, plan the status."""
        topics, brokers = self._inputs(observe=True)
        first = plan(self.clusters, topics, brokers, RunningWork(), self.clock())
        self._store(first)
        report = RoundReport(plan=first, events=list(first.events))
        for copy in first.copies:
            self._run_copy(copy)
            report.copies.append(copy)
        # Planned again with the copies' outcomes (same observations): cleanups follow the copies they
        # trim behind, in the same round.
        after_copies = self._replan(topics, brokers)
        for cleanup in after_copies.cleanups:
            self._run_cleanup(cleanup)
            report.cleanups.append(cleanup)
        final = self._replan(topics, brokers)  # the conditions and messages the round ends with
        self._store(final)
        report.plan = final
        report.events.extend(e for e in final.events if e not in report.events)
        return report

    def _replan(self, topics: list[TopicInput], brokers: list[BrokerInput]) -> Plan:
        return plan(
            self.clusters,
            [replace(t, status=self.topic_status[t.key]) for t in topics],
            [replace(b, status=self.broker_status[b.key]) for b in brokers],
            RunningWork(),
            self.clock(),
        )

    def _store(self, planned: Plan) -> None:
        self.topic_status.update(planned.topic_status)
        self.broker_status.update(planned.broker_status)

    def _run_copy(self, action: CopyAction) -> None:
        from storage_core.tiering.partition_copy import copy_partition
        from storage_core.tiering.plan import CopyTask

        cluster = self.clusters[action.cluster]
        broker = self.broker_specs[action.broker_key].value
        assert broker is not None  # the planner only copies from usable brokers
        wanted = [(w.topic, p) for w in action.work for p in w.partitions]
        results: list[dict[str, Any]] = []
        failure = None
        try:
            store = self._store_factory(cluster)
            lso = self._admin(action.cluster).last_stable_offsets(wanted)
            tasks = [
                CopyTask(
                    log_dir=broker.log_dir.path,
                    topic=topic,
                    partition=partition,
                    remote_url=cluster.remote.url,
                    storage_options=dict(cluster.remote.storage_options),
                    last_stable_offset=lso.get((topic, partition)),
                    high_watermark=None,
                    broker_id=action.broker_id,
                )
                for topic, partition in wanted
            ]
            with ThreadPoolExecutor(max_workers=cluster.jobs.copy_parallelism) as pool:
                results = [dict(r.__dict__) for r in pool.map(lambda t: copy_partition(t, store), tasks)]
        except TierkeeperError as exc:
            failure = str(exc)
        now = self.clock()
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in results:
            by_topic[r["topic"]].append(r)
        for work in action.work:
            self.topic_status[work.topic_key] = outcomes.topic_after_copy(
                self.topic_status[work.topic_key], by_topic.get(work.topic, []), now, failure=failure
            )
        self.broker_status[action.broker_key] = outcomes.broker_after_copy(
            self.broker_status[action.broker_key], results, now, failure=failure
        )

    def _run_cleanup(self, action: CleanupAction) -> None:
        from storage_core.jobs.cleanup import CleanupOptions, run_cleanup

        cluster = self.clusters[action.cluster]
        spec = action.spec
        report: dict[str, Any] | None = None
        failure = None
        try:
            report = run_cleanup(
                self._store_factory(cluster),
                CleanupOptions(
                    topics={action.topic},
                    bootstrap_servers=cluster.bootstrap_servers,
                    remote_retention_ms=spec.remote_retention_ms,
                    remote_retention_bytes=spec.remote_retention_bytes,
                    local_retention_ms=spec.local_retention_ms,
                    local_retention_bytes=spec.local_retention_bytes,
                ),
            )
        except TierkeeperError as exc:
            failure = str(exc)
        status = self.topic_status[action.topic_key]
        if report is not None and status.topic_id is not None:
            # Older incarnations of a recreated topic are cleaned too; the status is about the current one.
            report = {
                **report,
                "partitions": [p for p in report["partitions"] if p.get("topic_id") == status.topic_id],
            }
        self.topic_status[action.topic_key] = outcomes.topic_after_cleanup(
            status, report, self.clock(), failure=failure
        )


def _kafka_admin(cluster: KafkaClusterConfig) -> Any:
    from storage_core.adapters.kafka_admin import KafkaAdmin

    return KafkaAdmin(cluster.bootstrap_servers, dict(cluster.client_config))


def _remote_store(cluster: KafkaClusterConfig) -> Any:
    from storage_core.adapters.store import RemoteStore

    return RemoteStore(cluster.remote.url, dict(cluster.remote.storage_options))
