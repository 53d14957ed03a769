"""Prometheus metrics of the operator, on a registry of their own (no global state).

Label sets are bounded by default: by resource kind, Job kind and result, exception kind, never by topic
(10,000 topics would be 10,000 series per metric); per-topic figures live in each TieredTopic's status.
``topic_labels=True`` (``--metrics-topic-labels``) adds per-topic gauges for those who want them. The
trim-hold gauges (:mod:`.trim_metrics`) are the exception: per group and partition, but only while a hold
or an override lasts, and bounded per topic.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from storage_core.api.status import STALLED, TieredTopicStatus
from storage_core.reconcile.planner import Plan
from tierkeeper_operator.trim_metrics import TrimHoldGauges

TOPIC_FIGURES: tuple[tuple[str, str, Callable[[TieredTopicStatus], int]], ...] = (
    ("tiered_bytes", "Bytes in the remote tier", lambda s: s.remote.bytes if s.remote else 0),
    ("tiered_segments", "Segments in the remote tier", lambda s: s.remote.segments if s.remote else 0),
    ("copy_lag_bytes", "Rolled bytes not yet tiered", lambda s: s.copy_lag.bytes if s.copy_lag else 0),
    (
        "copy_lag_segments",
        "Rolled segments not yet tiered",
        lambda s: s.copy_lag.segments if s.copy_lag else 0,
    ),
)
"""What a round reports of the TieredTopics (name, help, the figure of one status): summed per cluster,
and per TieredTopic with ``topic_labels``."""


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None, topic_labels: bool = False) -> None:
        self.registry = registry or CollectorRegistry()
        self.topic_labels = topic_labels
        self.rounds = Counter("tierkeeper_reconcile_rounds", "Reconcile rounds run.", registry=self.registry)
        self.reconciles = Counter(
            "tierkeeper_reconciles",
            "Resources reconciled (once per round each), by resource kind.",
            ["kind"],
            registry=self.registry,
        )
        self.errors = Counter(
            "tierkeeper_reconcile_errors",
            "Reconcile rounds that failed, by exception kind.",
            ["kind"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "tierkeeper_reconcile_duration_seconds",
            "Duration of a reconcile round.",
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=self.registry,
        )
        self.jobs_started = Counter(
            "tierkeeper_jobs_started", "Jobs created, by kind.", ["kind"], registry=self.registry
        )
        self.jobs = Counter(
            "tierkeeper_jobs",
            "Jobs finished, by kind and result.",
            ["kind", "result"],
            registry=self.registry,
        )
        self.stalled = Gauge(
            "tierkeeper_stalled_resources", "Resources with Stalled=True.", ["kind"], registry=self.registry
        )
        # By Kafka cluster: bounded by the clusters configured, and what one cluster's alert is about.
        self.cluster_figures = {
            name: Gauge(f"tierkeeper_{name}", f"{text}.", ["cluster"], registry=self.registry)
            for name, text, _ in TOPIC_FIGURES
        }
        self.active = Gauge(
            "tierkeeper_active",
            "1 while this replica runs the reconcile rounds, 0 while it is a standby (peering).",
            registry=self.registry,
        )
        self.topic_gauges: dict[str, Gauge] = {}
        if topic_labels:
            for name, text, _ in TOPIC_FIGURES:
                self.topic_gauges[name] = Gauge(
                    f"tierkeeper_topic_{name}",
                    f"{text}, per TieredTopic.",
                    ["namespace", "name"],
                    registry=self.registry,
                )

        self.fetcher_imbalance = self._broker_gauge(
            "imbalance",
            "Busiest replica fetcher thread over the mean slot load at the broker's current "
            "num.replica.fetchers (1 = spread perfectly).",
        )
        self.fetcher_idle_threads = self._broker_gauge(
            "idle_threads",
            "Fetcher thread slots (num.replica.fetchers per leader followed) that carry no partition.",
        )
        self.fetcher_proposal_pending_seconds = self._broker_gauge(
            "proposal_pending_seconds",
            "Seconds a num.replica.fetchers proposal has waited for approval (0 when none waits).",
        )
        self.trim_holds = TrimHoldGauges(self.registry)
        self.fetcher_steps = Counter(
            "tierkeeper_fetcher_steps",
            "num.replica.fetchers steps set and in effect.",
            registry=self.registry,
        )

    def _broker_gauge(self, name: str, text: str) -> Gauge:
        # Labelled by broker: bounded by the cluster's size, and each fetcher figure is a per-broker fact.
        return Gauge(f"tierkeeper_fetcher_{name}", text, ["cluster", "broker"], registry=self.registry)

    def cluster_gauges(self) -> tuple[Gauge, ...]:
        return tuple(self.cluster_figures.values())

    def standby(self) -> None:
        """This replica stopped running rounds (peering): drop every gauge a round set, so Prometheus does
        not see a standby repeat the figures of the time it was active next to the active replica's."""
        for gauge in (
            self.stalled,
            *self.cluster_gauges(),
            *self.topic_gauges.values(),
            self.fetcher_imbalance,
            self.fetcher_idle_threads,
            self.fetcher_proposal_pending_seconds,
            *self.trim_holds.gauges(),
        ):
            gauge.clear()

    def observe_round(self, planned: Plan, seconds: float, fleet: bool = True) -> None:
        """``fleet``: the round judged every TieredTopic, so the TieredTopic gauges (Stalled, tiered
        bytes, lag) are set from it. A quick round judges a few TieredTopics and every TieredBroker: it
        counts all of them and sets the TieredBroker Stalled gauge only."""
        self.rounds.inc()
        self.duration.observe(seconds)
        for kind, statuses in (
            ("TieredTopic", planned.topic_status),
            ("TieredBroker", planned.broker_status),
        ):
            self.reconciles.labels(kind=kind).inc(len(statuses))
            if fleet or kind == "TieredBroker":
                stalled = sum(
                    1
                    for s in statuses.values()
                    if any(c.type == STALLED and c.status == "True" for c in s.conditions)
                )
                self.stalled.labels(kind=kind).set(stalled)
        if not fleet:
            return
        by_cluster: dict[str, list[TieredTopicStatus]] = {}
        for key, status in planned.topic_status.items():
            if key in planned.topic_cluster:
                by_cluster.setdefault(planned.topic_cluster[key], []).append(status)
        self.trim_holds.observe(planned)
        for gauge in self.cluster_gauges():
            gauge.clear()  # a cluster with no TieredTopic left leaves no stale series
        for cluster, topics in sorted(by_cluster.items()):
            for metric, _, figure in TOPIC_FIGURES:
                self.cluster_figures[metric].labels(cluster=cluster).set(sum(figure(s) for s in topics))
        if self.topic_labels:
            for gauge in self.topic_gauges.values():
                gauge.clear()  # deleted topics leave no stale series
            for key, s in planned.topic_status.items():
                namespace, _, name = key.partition("/")
                for metric, _, figure in TOPIC_FIGURES:
                    self.topic_gauges[metric].labels(namespace=namespace, name=name).set(figure(s))
