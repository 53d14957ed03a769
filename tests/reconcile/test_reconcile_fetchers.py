"""The fetcher change state machine (storage_core.reconcile.fetchers), on a known topology.

The LINE topology (25 brokers, 40 partitions, RF 3, round robin) at 5 fetchers leaves broker 2 with
two partitions from leader 0 on one thread while four slots idle; its best count is 4, one step away.
A second topology needs three steps (1 -> 2 -> 4 -> 6) so stop and drift land between steps.
"""

from __future__ import annotations

import datetime

from storage_core.api.resources import ReplicaFetchers
from storage_core.api.status import FetcherStatus
from storage_core.fetchers.model import Assignment
from storage_core.fetchers.placement import round_robin_placement
from storage_core.reconcile.conditions import Health
from storage_core.reconcile.fetchers import (
    FetcherObservation,
    after_step,
    broker_conditions,
    cluster_fetchers,
    decide,
    parse_command,
    shared_brokers,
    step_failed,
)

T0 = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.UTC)
AUTO = ReplicaFetchers.model_validate({"mode": "auto", "min": 1, "max": 8})


def line() -> Assignment:
    brokers = list(range(25))
    return Assignment(tuple(brokers), {"line-traffic": round_robin_placement(brokers, 40, 3, 0, 0)})


def wide() -> Assignment:
    """Broker 0 follows 12 partitions of one leader: 1 fetcher carries 12, 6 fetchers carry 2 each."""
    return Assignment((0, 1), {"t": [[1, 0]] * 12})


def seen(assignment: Assignment, current: int) -> FetcherObservation:
    return FetcherObservation(cluster=cluster_fetchers(assignment), current=current)


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def test_idle_threads_give_a_proposal_that_waits_for_approval() -> None:
    d = decide(AUTO, 2, seen(line(), 5), None, None, T0)
    assert d.status is not None and d.set_value is None
    assert d.status.phase == "ProposalReady"
    assert (d.status.current, d.status.proposed, d.status.steps) == (5, 4, [4])
    assert d.status.before is not None and d.status.after is not None
    assert d.status.before.idle_threads > d.status.after.idle_threads
    assert (d.status.before.busiest_thread_load, d.status.after.busiest_thread_load) == (2.0, 1.0)
    assert d.status.before.busiest_thread == "ReplicaFetcherThread-1-0"
    assert "tierkeeper.io/fetchers=approve" in d.status.message
    assert [e.reason for e in d.events] == ["FetcherProposal"]
    # Nothing changes while nobody approves, round after round.
    again = decide(AUTO, 2, seen(line(), 5), d.status, None, at(1))
    assert again.status == d.status and again.set_value is None and again.events == ()


def test_pending_is_ready_with_its_own_condition() -> None:
    d = decide(AUTO, 2, seen(line(), 5), None, None, T0)
    conditions = broker_conditions(Health(True, "Ready", "ok"), d.status, 3, [], T0)
    assert {c.type: c.status for c in conditions} == {"Ready": "True", "FetcherChangePending": "True"}
    pending = next(c for c in conditions if c.type == "FetcherChangePending")
    assert pending.reason == "ProposalPending" and "approve" in pending.message


def test_approve_applies_step_by_step_then_balanced() -> None:
    proposal = decide(AUTO, 0, seen(wide(), 1), None, None, T0).status
    assert proposal is not None and proposal.steps == [2, 4, 6]
    d = decide(AUTO, 0, seen(wide(), 1), proposal, "approve", at(1))
    assert d.consumed and d.set_value == 2 and d.status is not None and d.status.phase == "Applying"
    conditions = broker_conditions(Health(True, "Ready", "ok"), d.status, 3, [], T0)
    assert {c.type: c.status for c in conditions} == {
        "Ready": "True",
        "Reconciling": "True",
        "FetcherChangePending": "False",
    }
    status, current = d.status, 1
    seen_steps = []
    while True:
        d = decide(AUTO, 0, seen(wide(), current), status, None, at(2))
        assert d.status is not None
        if d.set_value is None:
            break
        seen_steps.append(d.set_value)
        status, current = after_step(d.status, d.set_value, at(2)), d.set_value
    assert seen_steps == [2, 4, 6]
    assert d.status.phase == "Balanced" and d.status.current == 6
    assert [e.reason for e in d.events] == ["FetcherChangeApplied"]


def test_auto_approve_and_fixed_need_no_annotation() -> None:
    auto = ReplicaFetchers.model_validate({"autoApprove": True})
    d = decide(auto, 0, seen(wide(), 1), None, None, T0)
    assert d.status is not None and d.status.phase == "Applying" and d.set_value == 2
    fixed = ReplicaFetchers.model_validate({"mode": "fixed", "value": 3})
    d = decide(fixed, 0, seen(wide(), 1), None, None, T0)
    assert d.status is not None and (d.status.proposed, d.status.steps, d.set_value) == (3, [2, 3], 2)


def test_stop_between_steps_keeps_the_reached_count_until_refresh() -> None:
    proposal = decide(AUTO, 0, seen(wide(), 1), None, None, T0).status
    applying = decide(AUTO, 0, seen(wide(), 1), proposal, "approve", T0).status
    assert applying is not None
    one_step = after_step(applying, 2, T0)
    stopped = decide(AUTO, 0, seen(wide(), 2), one_step, "stop", at(1))
    assert stopped.consumed and stopped.set_value is None
    assert stopped.status is not None and stopped.status.phase == "Stopped" and stopped.status.current == 2
    # A stopped change stays stopped even when the assignment changes and the interval has passed.
    later = decide(AUTO, 0, seen(Assignment((0, 1), {"t": [[1, 0]] * 13}), 2), stopped.status, None, at(60))
    assert later.status is not None and later.status.phase == "Stopped"
    refreshed = decide(AUTO, 0, seen(wide(), 2), stopped.status, "refresh", at(61))
    assert refreshed.status is not None and refreshed.status.phase == "ProposalReady"
    assert refreshed.status.steps == [4, 6] and refreshed.consumed


def test_assignment_change_replans_at_most_once_per_interval() -> None:
    first = decide(AUTO, 2, seen(line(), 4), None, None, T0).status
    assert first is not None and first.phase == "Balanced"
    brokers = list(range(25))
    changed = Assignment(
        tuple(brokers),
        {
            "line-traffic": round_robin_placement(brokers, 40, 3, 0, 0),
            "new-topic": round_robin_placement(brokers, 50, 3, 0, 0),
        },
    )
    soon = decide(AUTO, 2, seen(changed, 4), first, None, at(1))
    assert soon.status is not None and soon.status.planned_at == first.planned_at  # interval: 300 s
    later = decide(AUTO, 2, seen(changed, 4), first, None, at(6))
    assert later.status is not None and later.status.planned_at != first.planned_at
    assert later.status.observed != first.observed


def test_failed_step_stalls_until_refresh() -> None:
    proposal = decide(AUTO, 0, seen(wide(), 1), None, "approve", T0)
    assert proposal.status is not None
    applying = decide(AUTO, 0, seen(wide(), 1), proposal.status, "approve", T0).status
    assert applying is not None and applying.phase == "Applying"
    failed = step_failed(applying, 2, "broker 0 still reports 1", T0)
    conditions = broker_conditions(Health(True, "Ready", "ok"), failed, 1, [], T0)
    assert {c.type: c.status for c in conditions}["Stalled"] == "True"
    assert decide(AUTO, 0, seen(wide(), 1), failed, None, at(30)).status == failed
    assert decide(AUTO, 0, seen(wide(), 1), failed, "refresh", at(30)).status.phase == "ProposalReady"  # type: ignore[union-attr]


def test_unobservable_broker_keeps_its_status_and_the_annotation() -> None:
    proposal = decide(AUTO, 2, seen(line(), 5), None, None, T0).status
    d = decide(AUTO, 2, FetcherObservation(error="Kafka unreachable"), proposal, "approve", at(1))
    assert d.status is not None and d.status.phase == "ProposalReady" and not d.consumed
    assert "Kafka unreachable" in d.status.message


def test_commands() -> None:
    assert parse_command({"tierkeeper.io/fetchers": "Approve"}) == ("approve", None)
    assert parse_command({}) == (None, None)
    command, problem = parse_command({"tierkeeper.io/fetchers": "go"})
    assert command is None and problem is not None and "approve, refresh, stop" in problem


def test_spec_change_discards_the_old_proposal() -> None:
    proposal = decide(AUTO, 0, seen(wide(), 1), None, None, T0).status
    narrower = ReplicaFetchers.model_validate({"max": 2})
    d = decide(narrower, 0, seen(wide(), 1), proposal, None, at(1))
    assert isinstance(d.status, FetcherStatus) and d.status.steps == [2]


def test_a_count_above_max_is_brought_within_the_bounds_and_says_why() -> None:
    capped = ReplicaFetchers.model_validate({"max": 2})
    d = decide(capped, 0, seen(wide(), 8), None, None, T0)
    assert d.status is not None and d.status.steps == [4, 2]
    assert d.status.after is not None and d.status.after.busiest_thread_load == 6.0
    assert "outside 1..2" in d.status.explanation


def test_two_owners_of_one_broker_are_both_held() -> None:
    shared = shared_brokers([("ns/a", "c", 1), ("ns/b", "c", 1), ("ns/c", "c", 2), ("ns/d", "other", 1)])
    assert set(shared) == {"ns/a", "ns/b"}
    assert "managed by 2 TieredBrokers (ns/a, ns/b)" in shared["ns/a"]
