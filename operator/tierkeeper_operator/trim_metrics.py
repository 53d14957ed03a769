"""The trim-hold gauges: which direct readers hold a TieredTopic's local trim, and whom a bound stopped
waiting for, from each TieredTopic's ``status.trimHold`` as a full round planned it.

Labelled by group and partition, unlike the operator's other gauges (metrics.py bounds those by cluster):
a series exists only while a group holds a partition's trim or was overridden there, which is the state
an alert is about, and the status lists at most ``MAX_PARTITIONS`` partitions and ``MAX_GROUPS`` groups
per list of a topic, so a topic adds a bounded number of series however many groups read it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from storage_core.reconcile.planner import Plan

_LABELS = ["cluster", "topic", "partition", "group"]


class TrimHoldGauges:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.held_offsets = Gauge(
            "tierkeeper_trim_held_offsets",
            "Offsets a consumer group reading the brokers directly holds on the brokers beyond the local "
            "window (window end minus its committed offset), at the last cleanup.",
            _LABELS,
            registry=registry,
        )
        self.missed_offsets = Gauge(
            "tierkeeper_trim_hold_missed_offsets",
            "Offsets a direct reader will not find on the brokers because the trim hold's bound was "
            "exceeded (trim point minus its committed offset), at the last cleanup.",
            _LABELS,
            registry=registry,
        )
        self.held_partitions = Gauge(
            "tierkeeper_trim_held_partitions",
            "Partitions whose local trim a direct reader holds, summed over the cluster's TieredTopics.",
            ["cluster"],
            registry=registry,
        )
        self.unknown_topics = Gauge(
            "tierkeeper_trim_hold_unknown_topics",
            "TieredTopics whose last cleanup kept the trim because the groups' offsets were unknown.",
            ["cluster"],
            registry=registry,
        )

    def gauges(self) -> tuple[Gauge, ...]:
        return (self.held_offsets, self.missed_offsets, self.held_partitions, self.unknown_topics)

    def observe(self, planned: Plan) -> None:
        """Set from a full round's plan; series of holds that ended go away."""
        for gauge in self.gauges():
            gauge.clear()
        for key, status in planned.topic_status.items():
            hold, cluster = status.trim_hold, planned.topic_cluster.get(key)
            if hold is None or cluster is None:
                continue
            topic = planned.topic_name.get(key, key)
            self.held_partitions.labels(cluster=cluster).inc(hold.held_partitions)
            self.unknown_topics.labels(cluster=cluster).inc(1 if hold.unknown is not None else 0)
            for p in hold.partitions:
                where = {"cluster": cluster, "topic": topic, "partition": str(p.partition)}
                if p.window_to is not None:
                    for h in p.held_by:
                        self.held_offsets.labels(**where, group=h.group).set(max(0, p.window_to - h.offset))
                for o in p.overridden:
                    self.missed_offsets.labels(**where, group=o.group).set(max(0, o.to - o.offset))
