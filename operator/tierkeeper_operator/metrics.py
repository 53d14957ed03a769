"""Prometheus metrics of the operator, on a registry of their own (no global state).

Label sets are bounded: by resource kind, Job kind and result, never by topic (10,000 topics would be
10,000 series per metric); per-topic figures live in each TieredTopic's status.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from storage_core.api.status import STALLED
from storage_core.reconcile.planner import Plan


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.rounds = Counter("tierkeeper_reconcile_rounds", "Reconcile rounds run.", registry=self.registry)
        self.errors = Counter(
            "tierkeeper_reconcile_errors", "Reconcile rounds that failed.", ["kind"], registry=self.registry
        )
        self.duration = Histogram(
            "tierkeeper_reconcile_duration_seconds",
            "Duration of a reconcile round.",
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=self.registry,
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
        self.tiered_bytes = Gauge(
            "tierkeeper_tiered_bytes", "Bytes in the remote tier.", registry=self.registry
        )
        self.tiered_segments = Gauge(
            "tierkeeper_tiered_segments", "Segments in the remote tier.", registry=self.registry
        )
        self.lag_bytes = Gauge(
            "tierkeeper_copy_lag_bytes", "Rolled bytes not yet tiered.", registry=self.registry
        )

        # Labelled by broker: bounded by the cluster's size, and the imbalance is a per-broker fact.
        self.fetcher_imbalance = Gauge(
            "tierkeeper_fetcher_imbalance",
            "Busiest replica fetcher thread over the mean slot load at the broker's current "
            "num.replica.fetchers (1 = spread perfectly).",
            ["cluster", "broker"],
            registry=self.registry,
        )
        self.fetcher_idle_threads = Gauge(
            "tierkeeper_fetcher_idle_threads",
            "Fetcher thread slots (num.replica.fetchers per leader followed) that carry no partition.",
            ["cluster", "broker"],
            registry=self.registry,
        )
        self.fetcher_steps = Counter(
            "tierkeeper_fetcher_steps",
            "num.replica.fetchers steps set and in effect.",
            registry=self.registry,
        )

    def observe_round(self, planned: Plan, seconds: float) -> None:
        self.rounds.inc()
        self.duration.observe(seconds)
        for kind, statuses in (
            ("TieredTopic", planned.topic_status),
            ("TieredBroker", planned.broker_status),
        ):
            stalled = sum(
                1
                for s in statuses.values()
                if any(c.type == STALLED and c.status == "True" for c in s.conditions)
            )
            self.stalled.labels(kind=kind).set(stalled)
        topics = planned.topic_status.values()
        self.tiered_bytes.set(sum(s.remote.bytes for s in topics if s.remote))
        self.tiered_segments.set(sum(s.remote.segments for s in topics if s.remote))
        self.lag_bytes.set(sum(s.copy_lag.bytes for s in topics if s.copy_lag))
