"""The pure decision of when a TieredTopic's Iceberg table is exported to or maintained (spec.table), its
status (lag, condition on failure), and that the spec's rules hold in Python and CEL alike."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from pydantic import ValidationError

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.resources import TableSpec, TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.reconcile.conditions import rfc3339
from storage_core.reconcile.observed import BrokerInput, KafkaTopic, PartitionLeader, RunningWork, TopicInput
from storage_core.reconcile.planner import plan
from storage_core.reconcile.round import Statuses, TableOutcome, fold_table
from storage_core.reconcile.tables import decide_table, table_lag

T0 = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)
CLUSTERS = {
    "c": KafkaClusterConfig.model_validate(
        {"name": "c", "bootstrapServers": "k:9092", "remote": {"url": "memory://tier"}}
    )
}
BROKER = BrokerInput(
    "ns/b1",
    1,
    TieredBrokerSpec.model_validate({"clusterRef": {"name": "c"}, "brokerId": 1, "logDir": {"path": "/b1"}}),
    None,
    TieredBrokerStatus(),
)


def run(at: datetime.datetime, result: str = "Succeeded") -> dict[str, Any]:
    return {"time": rfc3339(at), "result": result, "failuresInARow": 1 if result == "Failed" else 0}


def status(
    tier_end: int | None = 99,
    exported: int | None = None,
    last_copy: datetime.datetime | None = T0,
    last_export: dict[str, Any] | None = None,
    last_maintenance: dict[str, Any] | None = None,
    snapshot: int | None = None,
) -> TieredTopicStatus:
    raw: dict[str, Any] = {}
    if tier_end is not None:
        raw["remote"] = {"partitions": [{"partition": 0, "startOffset": 0, "endOffset": tier_end}]}
    if last_copy is not None:
        raw["lastCopy"] = run(last_copy)
    table: dict[str, Any] = {}
    if exported is not None:
        table["exported"] = [{"partition": 0, "nextOffset": exported}]
    if last_export is not None:
        table["lastExport"] = last_export
    if last_maintenance is not None:
        table["lastMaintenance"] = last_maintenance
    if snapshot is not None:
        table["snapshotId"] = snapshot
    if table:
        raw["table"] = table
    return TieredTopicStatus.model_validate(raw)


def table(**extra: Any) -> TableSpec:
    return TableSpec.model_validate({"location": "s3://lake/orders", **extra})


MINUTE = datetime.timedelta(minutes=1)


@pytest.mark.parametrize(
    ("observed", "running", "want"),
    [
        (status(), False, "export"),  # tiered, never exported
        (status(), True, None),  # one table run per topic at a time
        (status(tier_end=None), False, None),  # nothing tiered yet
        (status(exported=100, last_export=run(T0), snapshot=1), False, None),  # current
        (
            status(exported=50, last_export=run(T0 - MINUTE), snapshot=1),
            False,
            "export",
        ),  # a copy tiered more
        # After a failed export: retried once a copy round ended after it, not every round.
        (status(exported=50, last_export=run(T0 + MINUTE, "Failed"), snapshot=1), False, None),
        (status(exported=50, last_export=run(T0 - MINUTE, "Failed"), snapshot=1), False, "export"),
    ],
)
def test_after_copy_exports_when_the_tier_holds_offsets_the_table_lacks(
    observed: TieredTopicStatus, running: bool, want: str | None
) -> None:
    spec = table(maintenance={"enabled": False})
    assert decide_table(spec, observed, running, T0 + 2 * MINUTE).action == want


def test_interval_exports_on_its_interval_and_says_when_it_falls_due() -> None:
    spec = table(trigger="Interval", intervalSeconds=600, maintenance={"enabled": False})
    observed = status(exported=50, last_export=run(T0), snapshot=1)
    early = decide_table(spec, observed, False, T0 + 5 * MINUTE)
    assert (early.action, early.due_at) == (None, T0 + 10 * MINUTE)
    assert decide_table(spec, observed, False, T0 + 10 * MINUTE).action == "export"
    caught_up = status(exported=100, last_export=run(T0), snapshot=1)
    assert decide_table(spec, caught_up, False, T0 + 60 * MINUTE).action is None


def test_maintenance_runs_on_its_interval_once_a_snapshot_exists_and_after_exports() -> None:
    spec = table(maintenance={"intervalSeconds": 3600})
    assert (
        decide_table(spec, status(exported=100, last_export=run(T0)), False, T0).action is None
    )  # no snapshot
    current = status(exported=100, last_export=run(T0), snapshot=7)
    assert decide_table(spec, current, False, T0).action == "maintain"
    done = status(exported=100, last_export=run(T0), snapshot=7, last_maintenance=run(T0))
    later = decide_table(spec, done, False, T0 + MINUTE)
    assert (later.action, later.due_at) == (None, T0 + 60 * MINUTE)
    behind = status(exported=10, last_export=run(T0 - MINUTE), snapshot=7)
    assert decide_table(spec, behind, False, T0).action == "export"  # export first


def test_lag_sums_the_offsets_the_table_lacks_from_the_tier_start() -> None:
    observed = status(tier_end=99, exported=40)
    assert table_lag(observed.remote, observed.table) == 60
    assert table_lag(observed.remote, None) == 100
    assert table_lag(None, observed.table) == 0


def _topic(st: TieredTopicStatus, spec: dict[str, Any] | None = None) -> TopicInput:
    raw = {"clusterRef": {"name": "c"}, "topic": "orders", **(spec or {})}
    kafka = KafkaTopic(
        "orders", "id", {"cleanup.policy": "delete", "retention.ms": "-1"}, (PartitionLeader(0, 1),)
    )
    return TopicInput("ns/orders", 1, TieredTopicSpec.model_validate(raw), None, st, kafka)


def test_the_planner_plans_the_export_and_a_failed_one_shows_in_the_status_and_conditions() -> None:
    spec = {"table": {"location": "s3://lake/orders"}, "copy": {"intervalSeconds": 3600}}
    planned = plan(CLUSTERS, [_topic(status(), spec)], [BROKER], RunningWork(), T0 + MINUTE)
    assert [(a.kind, a.topic_key) for a in planned.tables] == [("export", "ns/orders")]
    busy = RunningWork(table_topics=frozenset({"ns/orders"}))
    assert plan(CLUSTERS, [_topic(status(), spec)], [BROKER], busy, T0 + MINUTE).tables == []

    statuses = Statuses({"ns/orders": status()}, {})
    fold_table(statuses, "ns/orders", "export", TableOutcome(None, "catalog lake: 403", "job-1"), T0 + MINUTE)
    failed = plan(
        CLUSTERS, [_topic(statuses.topics["ns/orders"], spec)], [BROKER], RunningWork(), T0 + MINUTE
    )
    st = failed.topic_status["ns/orders"]
    ready = next(c for c in st.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "ExportFailed") and "403" in ready.message
    assert failed.tables == []  # retried after the next copy round, not at once

    report = {
        "table": "tierkeeper.orders",
        "location": "s3://lake/orders",
        "records": 80,
        "files": 2,
        "snapshot_id": 42,
        "rows": 80,
        "next_offsets": {"0": 80},
    }
    fold_table(statuses, "ns/orders", "export", TableOutcome(report, None, "job-2"), T0 + 2 * MINUTE)
    ok = plan(
        CLUSTERS, [_topic(statuses.topics["ns/orders"], spec)], [BROKER], RunningWork(), T0 + 2 * MINUTE
    )
    st = ok.topic_status["ns/orders"]
    assert st.table is not None and (st.table.snapshot_id, st.table.rows, st.table.lag_offsets) == (
        42,
        80,
        20,
    )
    assert next(c for c in st.conditions if c.type == "Ready").status == "True"
    no_table = plan(CLUSTERS, [_topic(st, {})], [BROKER], RunningWork(), T0 + 2 * MINUTE)
    assert no_table.topic_status["ns/orders"].table is None and no_table.tables == []


@pytest.mark.parametrize(
    ("extra", "ok"),
    [
        ({"trigger": "Interval", "intervalSeconds": 600}, True),
        ({"intervalSeconds": 600}, False),  # interval without trigger Interval
        ({"catalog": {"name": "lake", "properties": {"uri": "https://c"}}}, True),
        ({"catalog": {"name": "lake", "properties": {"credential": "x"}}}, False),
        ({"name": "kafka.orders"}, True),
        ({"name": "orders"}, False),
    ],
)
def test_table_spec_rules(extra: dict[str, Any], ok: bool) -> None:
    raw = {"location": "s3://lake/orders", **extra}
    if ok:
        TableSpec.model_validate(raw)
    else:
        with pytest.raises(ValidationError):
            TableSpec.model_validate(raw)
