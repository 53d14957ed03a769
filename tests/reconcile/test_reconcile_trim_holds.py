"""What holds a topic's local trim, folded from cleanup reports (the shape ``run_cleanup`` gives each
partition's ``trim_hold``) into ``status.trimHold``, the ``TrimHeld`` condition and its Warning Events;
the same through a Job's termination message as in process. Pure: synthetic reports, no Kafka."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from test_reconcile_planner import BROKERS, CLUSTERS, T0, conditions, copy_result, topic

from storage_core.api.status import TieredTopicStatus
from storage_core.api.trim_hold_status import MAX_GROUPS, MAX_PARTITIONS, TrimHoldStatus
from storage_core.reconcile import outcomes
from storage_core.reconcile.observed import RunningWork
from storage_core.reconcile.outcomes import RunEnd
from storage_core.reconcile.planner import Plan, plan
from storage_core.reconcile.results import LIMIT, decode_cleanup, encode_cleanup
from storage_core.reconcile.round import CleanupOutcome, Statuses, fold_cleanup
from storage_core.reconcile.trim_holds import summarize

LATER = T0 + datetime.timedelta(minutes=10)


def held(window_to: int | None, to: int | None, *groups: tuple[str, int]) -> dict[str, Any]:
    return {"window_to": window_to, "to": to, "held_by": [{"group": g, "offset": o} for g, o in groups]}


def overridden(window_to: int, to: int, *groups: tuple[str, int, str]) -> dict[str, Any]:
    return {
        "window_to": window_to,
        "to": to,
        "held_by": [],
        "overridden": [{"group": g, "offset": o, "to": to, "reason": r} for g, o, r in groups],
    }


def report(*holds: dict[str, Any] | None, errors: tuple[str, ...] = ()) -> dict[str, Any]:
    """A cleanup report of topic orders (id id-orders), partition i holding ``holds[i]``."""
    partitions = []
    for number, hold in enumerate(holds):
        row: dict[str, Any] = {
            "topic": "orders",
            "topic_id": "id-orders",
            "partition": number,
            "remote_start_offset": 0,
            "deleted": [],
            "bytes_deleted": 0,
            "local_trim": None if hold is None or hold.get("to") is None else {"from": 0, "to": hold["to"]},
        }
        if hold is not None:
            row["trim_hold"] = hold
        partitions.append(row)
    return {"partitions": partitions, "errors": list(errors), "bytes_deleted": 0}


def copied() -> TieredTopicStatus:
    status = TieredTopicStatus(topic_id="id-orders")
    return outcomes.topic_after_copy(status, [copy_result(p) for p in range(4)], RunEnd(T0))


def fold(status: TieredTopicStatus, cleanup: dict[str, Any] | None, failure: str | None = None) -> Any:
    statuses = Statuses({"ns/orders": status}, {})
    fold_cleanup(statuses, ["ns/orders"], CleanupOutcome(cleanup, failure, "job"), LATER)
    return statuses.topics["ns/orders"]


def planned(status: TieredTopicStatus) -> Plan:
    return plan(CLUSTERS, [topic(status=status)], BROKERS, RunningWork(), LATER)


def test_a_held_partition_shows_who_holds_it_and_ready_is_left_alone() -> None:
    cleanup = report(
        held(28_937, 5_000, ("billing-sink", 5_000), ("audit", 12_000)),
        held(30_000, 30_000),  # judged, nobody below the window
        None,  # a partition the cleanup did not judge
        held(None, None, ("billing-sink", 0)),  # the window trims nothing here: nothing held back
    )
    status = fold(copied(), cleanup).trim_hold
    assert status is not None and status.held_partitions == 2 and status.overridden_partitions == 0
    first = status.partitions[0]
    assert (first.partition, first.window_to, first.trimmed_to) == (0, 28_937, 5_000)
    assert [(h.group, h.offset) for h in first.held_by] == [("billing-sink", 5_000), ("audit", 12_000)]
    assert [p.partition for p in status.partitions] == [0, 3]
    assert status.checked_at == "2026-03-01T12:10:00Z"

    result = planned(fold(copied(), cleanup)).topic_status["ns/orders"]
    assert conditions(result) == {"Ready": ("True", "Tiering"), "TrimHeld": ("True", "TrimHeld")}
    message = next(c.message for c in result.conditions if c.type == "TrimHeld")
    assert "partition 0 by group billing-sink at offset 5000, window to 28937 and 1 more" in message
    assert (
        result.last_cleanup is not None and "held back by direct readers on 2" in result.last_cleanup.message
    )
    assert not [e for e in planned(fold(copied(), cleanup)).events if e.reason.startswith("Trim")]


def test_nobody_holding_and_no_report_of_holds_mean_no_condition() -> None:
    """Like Reconciling and Stalled, TrimHeld is there only while it has something to say."""
    quiet = fold(copied(), report(held(30_000, 30_000), held(10, 10)))
    assert quiet.trim_hold == TrimHoldStatus(checked_at="2026-03-01T12:10:00Z")
    assert conditions(planned(quiet).topic_status["ns/orders"]) == {"Ready": ("True", "Tiering")}
    was_held = planned(fold(copied(), report(held(30_000, 100, ("g", 100))))).topic_status["ns/orders"]
    assert "TrimHeld" in conditions(was_held)
    released = planned(fold(was_held, report(held(30_000, 30_000)))).topic_status["ns/orders"]
    assert "TrimHeld" not in conditions(released)  # the group caught up: the condition goes
    # trimHold disabled (or a cleanup of before the hold existed): the report has no trim_hold at all.
    disabled = fold(quiet, report(None, None))
    assert disabled.trim_hold is None
    assert "TrimHeld" not in conditions(planned(disabled).topic_status["ns/orders"])


def test_a_failed_run_keeps_the_hold_it_knew() -> None:
    before = fold(copied(), report(held(28_937, 5_000, ("billing-sink", 5_000))))
    assert fold(before, None, failure="Job cleanup-1 failed: OOMKilled").trim_hold == before.trim_hold
    # A run with errors whose partitions never got to the hold: the last known stays, too.
    partial = fold(before, report(None, errors=("partition 0: Kafka said NOT_LEADER",)))
    assert partial.trim_hold == before.trim_hold


def test_a_bound_overridden_names_group_partition_and_the_offsets_it_misses_once() -> None:
    cleanup = report(
        overridden(28_937, 28_937, ("stalled-etl", 5_000, "maxAge")),
        held(30_000, 20_000, ("billing-sink", 20_000)),
    )
    status = fold(copied(), cleanup)
    assert status.trim_hold.overridden_partitions == 1 and status.trim_hold.held_partitions == 1
    first = planned(status)
    result = first.topic_status["ns/orders"]
    assert conditions(result)["Ready"] == ("True", "Tiering")  # not an error of Tierkeeper's
    assert conditions(result)["TrimHeld"] == ("True", "TrimHoldExceeded")
    (event,) = [e for e in first.events if e.reason == "TrimHoldExceeded"]
    assert event.type == "Warning"
    assert "group stalled-etl misses offsets [5000, 28937) of partition 0 (maxAge)" in event.message
    # Said once: the next round (nothing new) repeats no Warning.
    again = planned(result)
    assert not [e for e in again.events if e.reason == "TrimHoldExceeded"]
    # The next cleanup trims further past the stalled group: a new Warning with the new offsets.
    further = fold(result, report(overridden(40_000, 40_000, ("stalled-etl", 5_000, "maxAge"))))
    (event,) = [e for e in planned(further).events if e.reason == "TrimHoldExceeded"]
    assert "[5000, 40000)" in event.message
    # A bound overridden with no partition still held: False, with the reason that says why.
    assert conditions(planned(further).topic_status["ns/orders"])["TrimHeld"] == ("False", "TrimHoldExceeded")


def test_unknown_group_offsets_say_the_trim_was_kept_and_warn() -> None:
    reason = "ListConsumerGroupOffsets: COORDINATOR_NOT_AVAILABLE"
    cleanup = report(
        {"unknown": reason}, {"unknown": reason}, errors=(f"trim held: orders: {reason}; the trim was kept",)
    )
    status = fold(copied(), cleanup)
    assert status.trim_hold.unknown == reason
    first = planned(status)
    result = first.topic_status["ns/orders"]
    assert conditions(result)["TrimHeld"] == ("True", "TrimHoldUnknown")
    message = next(c.message for c in result.conditions if c.type == "TrimHeld")
    assert reason in message and "the trim was kept" in message
    assert [e.type for e in first.events if e.reason == "TrimHoldUnknown"] == ["Warning"]
    # The run's error line is a failed cleanup, retried like any other (never a silent success).
    assert result.last_cleanup is not None and result.last_cleanup.result == "Failed"
    assert "trim held: orders" in result.last_cleanup.message


def test_the_status_lists_few_partitions_and_groups_but_counts_them_all() -> None:
    many_groups = [(f"g{i}", 100 + i) for i in range(MAX_GROUPS + 4)]
    holds = [held(10_000, 100, *many_groups) for _ in range(MAX_PARTITIONS + 10)]
    holds[-1] = overridden(10_000, 10_000, ("late", 50, "maxBytes"))
    holds[5] = held(10_000, 5, ("deepest", 5))
    summary = summarize(report(*holds)["partitions"])
    assert summary is not None
    assert summary.held_partitions == MAX_PARTITIONS + 9 and summary.overridden_partitions == 1
    assert len(summary.partitions) == MAX_PARTITIONS and summary.more_partitions == 10
    listed = {p.partition: p for p in summary.partitions}
    assert MAX_PARTITIONS + 9 in listed and 5 in listed  # the override and the longest hold come first
    some = listed[0]
    assert [h.group for h in some.held_by] == ["g0", "g1", "g2"][:MAX_GROUPS]
    assert some.more_groups == 4


@pytest.mark.parametrize(
    "holds",
    [
        [held(28_937, 5_000, ("billing-sink", 5_000)), overridden(9, 9, ("etl", 1, "maxAge")), None],
        [{"unknown": "coordinator unreachable"}],
        [held(30_000, 30_000)],
        [None, None],
    ],
    ids=["held-and-overridden", "unknown", "not-held", "no-hold"],
)
def test_a_job_result_folds_into_the_same_hold_as_the_report_in_process(holds: list[Any]) -> None:
    cleanup = report(*holds)
    decoded, failure = decode_cleanup(encode_cleanup(cleanup))
    assert failure is None
    assert fold(copied(), decoded) == fold(copied(), cleanup)
    assert planned(fold(copied(), decoded)).events == planned(fold(copied(), cleanup)).events


@pytest.mark.parametrize(("name_length", "all_listed"), [(150, True), (240, False)])
def test_a_hold_too_large_for_the_termination_message_keeps_its_counts_and_fits(
    name_length: int, all_listed: bool
) -> None:
    """Long group names: first each list keeps its first group, then only a few partitions are listed
    (the overridden ones kept, they warn); the counts stay exact."""
    long = "connect-sink-" + "x" * name_length
    groups = [(f"{long}-{i}", 10 + i) for i in range(MAX_GROUPS)]
    holds: list[Any] = [held(10_000, 10, *groups) for _ in range(MAX_PARTITIONS)]
    holds[3] = overridden(10_000, 10_000, (long, 7, "maxAge"))
    cleanup = report(*holds)
    text = encode_cleanup(cleanup)
    assert len(text) <= LIMIT
    decoded, _ = decode_cleanup(text)
    assert decoded is not None
    status = fold(copied(), decoded).trim_hold
    assert status is not None
    assert (status.held_partitions, status.overridden_partitions) == (MAX_PARTITIONS - 1, 1)
    assert status.held_partitions + status.overridden_partitions == len(status.partitions) + (
        status.more_partitions
    )
    assert all(len(p.held_by) <= 1 for p in status.partitions)
    assert {p.more_groups for p in status.partitions if p.held_by} == {MAX_GROUPS - 1}
    assert (len(status.partitions) == MAX_PARTITIONS) is all_listed
    assert 3 in {p.partition for p in status.partitions}
    event = next(e for e in planned(fold(copied(), decoded)).events if e.reason == "TrimHoldExceeded")
    assert f"group {long} misses offsets [7, 10000) of partition 3" in event.message


def test_an_unreadable_hold_summary_is_an_error_and_keeps_the_hold() -> None:
    before = fold(copied(), report(held(28_937, 5_000, ("billing-sink", 5_000))))
    document = json.loads(encode_cleanup(report(held(1, 1, ("x", 0)))))
    document["holds"] = {"id-orders": {"n": "three"}}
    decoded, failure = decode_cleanup(json.dumps(document))
    assert failure is None and decoded is not None
    after = fold(before, decoded)
    assert after.trim_hold == before.trim_hold
    assert (
        after.last_cleanup.result == "Failed" and "unreadable trim hold summary" in after.last_cleanup.message
    )
