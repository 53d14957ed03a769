"""The operator's round metrics: what a full round and a quick round count and set (no control plane:
``Metrics.observe_round`` is fed plans directly and read back from its registry)."""

from __future__ import annotations

from storage_core.api.status import STALLED, Condition, CopyLag, TieredBrokerStatus, TieredTopicStatus
from storage_core.api.trim_hold_status import TrimHoldStatus
from storage_core.reconcile.planner import Plan
from tierkeeper_operator.metrics import Metrics

NOW = "2026-11-24T10:00:00Z"


def _stalled(status: bool) -> list[Condition]:
    value = "True" if status else "False"
    return [Condition(type=STALLED, status=value, reason="Test", last_transition_time=NOW)]


def _plan(
    topics: int, stalled_topics: int, brokers: int, stalled_brokers: int, lag: int, clusters: int = 1
) -> Plan:
    return Plan(
        topic_cluster={f"ns/t{i}": f"c{i % clusters}" for i in range(topics)},
        topic_status={
            f"ns/t{i}": TieredTopicStatus(
                conditions=_stalled(i < stalled_topics), copy_lag=CopyLag(segments=1, bytes=lag)
            )
            for i in range(topics)
        },
        broker_status={
            f"ns/b{i}": TieredBrokerStatus(conditions=_stalled(i < stalled_brokers)) for i in range(brokers)
        },
    )


def _value(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    assert value is not None, (name, labels)
    return value


def test_a_quick_round_counts_every_object_it_judged_and_leaves_the_topic_gauges() -> None:
    metrics = Metrics()
    metrics.observe_round(_plan(topics=5, stalled_topics=2, brokers=3, stalled_brokers=1, lag=100), 0.5)
    # A quick round over two TieredTopics (one of them Stalled now), judging all three TieredBrokers
    # (two Stalled now).
    metrics.observe_round(
        _plan(topics=2, stalled_topics=1, brokers=3, stalled_brokers=2, lag=7), 0.1, fleet=False
    )
    assert _value(metrics, "tierkeeper_reconciles_total", kind="TieredTopic") == 5 + 2
    assert _value(metrics, "tierkeeper_reconciles_total", kind="TieredBroker") == 3 + 3
    # The TieredTopic gauges describe the whole fleet, which only a full round saw.
    assert _value(metrics, "tierkeeper_stalled_resources", kind="TieredTopic") == 2
    assert _value(metrics, "tierkeeper_copy_lag_bytes", cluster="c0") == 5 * 100
    # Every TieredBroker was judged, so their gauge follows the quick round.
    assert _value(metrics, "tierkeeper_stalled_resources", kind="TieredBroker") == 2
    assert _value(metrics, "tierkeeper_reconcile_rounds_total") == 2


def test_cluster_gauges_are_per_cluster_and_a_standby_drops_every_round_gauge() -> None:
    metrics = Metrics(topic_labels=True)
    metrics.observe_round(
        _plan(topics=5, stalled_topics=1, brokers=2, stalled_brokers=0, lag=10, clusters=2), 1
    )
    # Topics 0, 2, 4 are on c0 and 1, 3 on c1.
    assert _value(metrics, "tierkeeper_copy_lag_bytes", cluster="c0") == 30
    assert _value(metrics, "tierkeeper_copy_lag_segments", cluster="c1") == 2
    assert metrics.registry.get_sample_value("tierkeeper_copy_lag_bytes") is None  # no unlabelled series
    # A cluster whose TieredTopics are gone leaves no series behind.
    metrics.observe_round(_plan(topics=1, stalled_topics=0, brokers=2, stalled_brokers=0, lag=10), 1)
    assert metrics.registry.get_sample_value("tierkeeper_copy_lag_bytes", {"cluster": "c1"}) is None
    metrics.fetcher_imbalance.labels(cluster="c0", broker="1").set(1.5)
    # The replica turns standby: what it showed while active must not stay next to the active one's.
    metrics.standby()
    for name, labels in (
        ("tierkeeper_copy_lag_bytes", {"cluster": "c0"}),
        ("tierkeeper_tiered_bytes", {"cluster": "c0"}),
        ("tierkeeper_stalled_resources", {"kind": "TieredTopic"}),
        ("tierkeeper_topic_copy_lag_bytes", {"namespace": "ns", "name": "t0"}),
        ("tierkeeper_fetcher_imbalance", {"cluster": "c0", "broker": "1"}),
    ):
        assert metrics.registry.get_sample_value(name, labels) is None, name
    # Counters are history, not state: they stay.
    assert _value(metrics, "tierkeeper_reconcile_rounds_total") == 2


def test_trim_hold_gauges_name_group_partition_and_offsets_while_the_hold_lasts() -> None:
    hold = TrimHoldStatus.model_validate(
        {
            "heldPartitions": 1,
            "overriddenPartitions": 1,
            "partitions": [
                {
                    "partition": 0,
                    "windowTo": 28_937,
                    "trimmedTo": 5_000,
                    "heldBy": [{"group": "g", "offset": 5_000}],
                },
                {
                    "partition": 2,
                    "windowTo": 9_000,
                    "trimmedTo": 9_000,
                    "overridden": [{"group": "etl", "offset": 1_000, "to": 9_000, "reason": "maxAge"}],
                },
            ],
        }
    )
    held = Plan(
        topic_cluster={"ns/orders": "c0", "ns/other": "c0"},
        topic_name={"ns/orders": "orders.v1", "ns/other": "other"},
        topic_status={
            "ns/orders": TieredTopicStatus(trim_hold=hold),
            "ns/other": TieredTopicStatus(trim_hold=TrimHoldStatus(unknown="coordinator unreachable")),
        },
    )
    metrics = Metrics()
    metrics.observe_round(held, 1)
    where = {"cluster": "c0", "topic": "orders.v1"}
    assert _value(metrics, "tierkeeper_trim_held_offsets", **where, partition="0", group="g") == 23_937
    assert (
        _value(metrics, "tierkeeper_trim_hold_missed_offsets", **where, partition="2", group="etl") == 8_000
    )
    assert _value(metrics, "tierkeeper_trim_held_partitions", cluster="c0") == 1
    assert _value(metrics, "tierkeeper_trim_hold_unknown_topics", cluster="c0") == 1
    # A quick round leaves them (it judged a few topics); a full round without the hold drops its series.
    metrics.observe_round(Plan(topic_status={"ns/orders": TieredTopicStatus()}), 1, fleet=False)
    assert _value(metrics, "tierkeeper_trim_held_offsets", **where, partition="0", group="g") == 23_937
    released = Plan(topic_cluster={"ns/orders": "c0"}, topic_status={"ns/orders": TieredTopicStatus()})
    metrics.observe_round(released, 1)
    labels = {**where, "partition": "0", "group": "g"}
    assert metrics.registry.get_sample_value("tierkeeper_trim_held_offsets", labels) is None
    metrics.observe_round(held, 1)
    metrics.standby()
    assert metrics.registry.get_sample_value("tierkeeper_trim_held_offsets", labels) is None
