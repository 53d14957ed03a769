"""The campaign's own rules, without the real system: the checker finds each kind of broken promise, a
seed gives one plan, and shrinking finds the faults a failure needs."""

from __future__ import annotations

import pytest

from campaign.checker import (
    ABORTED_VISIBLE,
    CHANGED,
    DUPLICATED,
    LOST,
    OLD_INCARNATION,
    OUT_OF_ORDER,
    OVER_DELETED,
    RETAINED,
    check,
    check_retention,
    retention_prefix,
    summary,
)
from campaign.ledger import Ledger, Record
from campaign.plan import (
    BROKER_KILL,
    BROKER_WIPE,
    CLOCK_JUMP,
    DELETE_MOMENTS,
    EXTRA_KINDS,
    KINDS,
    LEADER_CHANGE,
    OPERATOR_KILL,
    OPERATOR_KINDS,
    OPERATOR_MOMENTS,
    RECONCILER_KILL,
    S3_ERRORS,
    S3_OUTAGE,
    TIERED_TOPIC_DELETE,
    TOPIC_RECREATE,
    Fault,
    RoundPlan,
    plan_round,
)
from campaign.shrink import shrink


def ledger_of(count: int, topic: str = "t", partition: int = 0) -> tuple[Ledger, list[Record]]:
    ledger = Ledger()
    records = [Record(topic, partition, i, f"v{i}".encode()) for i in range(count)]
    for r in records:
        ledger.ack(r)
    return ledger, records


def kinds(findings: list) -> list[str]:
    return [f.kind for f in findings]


def test_a_complete_read_has_no_findings() -> None:
    ledger, records = ledger_of(5)
    assert check(ledger, records, read_committed=True) == []


def test_each_broken_promise_is_named() -> None:
    ledger, records = ledger_of(6)
    read = [records[0], records[2], records[1], Record("t", 0, 3, b"other"), records[4], records[4]]
    found = check(ledger, read, read_committed=True)
    assert {k: v for k, v in summary(found).items() if v} == {
        LOST: 1,
        CHANGED: 1,
        DUPLICATED: 1,
        OUT_OF_ORDER: 1,
    }
    assert {(f.kind, f.offset) for f in found} == {
        (OUT_OF_ORDER, 1),
        (CHANGED, 3),
        (DUPLICATED, 4),
        (LOST, 5),
    }


def test_a_value_read_at_two_offsets_is_a_duplicate() -> None:
    ledger, records = ledger_of(2)
    # The producer's retry wrote the second record twice; only the first write was acknowledged.
    read = [*records, Record("t", 0, 2, b"v1")]
    assert kinds(check(ledger, read, read_committed=True)) == [DUPLICATED]


def test_aborted_records_are_findings_only_under_read_committed() -> None:
    ledger, records = ledger_of(2)
    aborted = [Record("t", 0, 2, b"a0")]
    ledger.abort(aborted)
    assert kinds(check(ledger, [*records, *aborted], read_committed=True)) == [ABORTED_VISIBLE]
    assert check(ledger, [*records, *aborted], read_committed=False) == []


def test_records_below_the_retention_bound_may_be_gone_but_not_changed() -> None:
    ledger, records = ledger_of(4)
    assert check(ledger, records[2:], read_committed=True, retained_from={("t", 0): 2}) == []
    assert kinds(check(ledger, records[2:], read_committed=True, retained_from={("t", 0): 1})) == [LOST]
    changed = [Record("t", 0, 0, b"x"), *records[2:]]
    assert kinds(check(ledger, changed, read_committed=True, retained_from={("t", 0): 2})) == [CHANGED]


def test_topics_outside_the_check_are_ignored() -> None:
    ledger, records = ledger_of(2)
    other, _ = ledger_of(3, topic="u")
    ledger.acked.update(other.acked)
    assert check(ledger, records, read_committed=True, topics=["t"]) == []
    assert kinds(check(ledger, records, read_committed=True)) == [LOST, LOST, LOST]


def test_a_second_acknowledgement_of_one_offset_with_another_value_is_refused() -> None:
    ledger, _ = ledger_of(1)
    with pytest.raises(AssertionError, match="acked twice"):
        ledger.ack(Record("t", 0, 0, b"different"))


def test_one_seed_one_plan_and_seeds_differ() -> None:
    first = plan_round(7, 0, steps=5, brokers=(1, 2, 3), faults=6)
    assert first == plan_round(7, 0, steps=5, brokers=(1, 2, 3), faults=6)
    plans = {plan_round(seed, 0, steps=5, brokers=(1, 2, 3), faults=6).faults for seed in range(20)}
    assert len(plans) > 15
    drawn = {
        f.kind for seed in range(50) for f in plan_round(seed, 1, steps=5, brokers=(1, 2, 3), faults=6).faults
    }
    assert drawn == set(KINDS + EXTRA_KINDS)


def test_at_most_one_broker_fault_and_one_s3_fault_per_step() -> None:
    for seed in range(100):
        plan = plan_round(seed, 0, steps=3, brokers=(1, 2, 3), faults=8)
        for step in range(3):
            broker_faults = [
                f
                for f in plan.at(step)
                if f.kind in (BROKER_KILL, LEADER_CHANGE, BROKER_WIPE, TOPIC_RECREATE)
            ]
            assert len(broker_faults) <= 1, plan.history()
            assert len([f for f in plan.at(step) if f.kind in (S3_ERRORS, S3_OUTAGE)]) <= 1, plan.history()
        for fault in plan.faults:
            assert (fault.point is not None) == (fault.kind == RECONCILER_KILL)


def test_the_extra_kinds_leave_the_earlier_draws_as_they_were() -> None:
    drawn: set[str] = set()
    for seed in range(30):
        plain = plan_round(seed, 1, steps=3, brokers=(1, 2, 3), faults=4, extras=())
        full = plan_round(seed, 1, steps=3, brokers=(1, 2, 3), faults=4, extra_rate=1.0)
        assert [f for f in full.faults if f.kind in KINDS] == list(plain.faults)
        drawn |= {f.kind for f in full.faults} - set(KINDS)
        for fault in full.faults:
            if fault.kind in (TOPIC_RECREATE, CLOCK_JUMP):
                assert fault.step >= 1  # something before it: a tier to keep, records to expire
    assert drawn == set(EXTRA_KINDS)  # a step free of broker faults is there often enough


def test_the_operator_kinds_come_only_in_operator_mode_and_leave_the_other_draws_alone() -> None:
    drawn: set[str] = set()
    for seed in range(30):
        standalone = plan_round(seed, 1, steps=3, brokers=(1, 2, 3), faults=4)
        operator = plan_round(seed, 1, steps=3, brokers=(1, 2, 3), faults=4, operator_kinds=OPERATOR_KINDS)
        assert [f for f in operator.faults if f.kind not in OPERATOR_KINDS] == list(standalone.faults)
        drawn |= {f.kind for f in operator.faults} - {f.kind for f in standalone.faults}
        for fault in operator.faults:
            if fault.kind == TIERED_TOPIC_DELETE:
                assert fault.step >= 1 and fault.point in DELETE_MOMENTS  # it has a tier to delete
                assert operator.deleted_topic() == fault
            elif fault.kind == OPERATOR_KILL:
                assert fault.point in OPERATOR_MOMENTS
        assert standalone.deleted_topic() is None
    assert drawn == set(OPERATOR_KINDS)


def test_a_topic_recreated_at_the_last_step_owes_no_trim_before_the_checks() -> None:
    last = RoundPlan(7, 1, 2, (Fault(1, TOPIC_RECREATE),))
    assert last.recreated_last()
    assert not RoundPlan(7, 1, 3, (Fault(1, TOPIC_RECREATE),)).recreated_last()
    assert not RoundPlan(7, 1, 2, (Fault(1, CLOCK_JUMP),)).recreated_last()


def test_an_unknown_fault_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault kinds"):
        plan_round(1, 0, steps=2, brokers=(1,), faults=1, kinds=("meteor",))


def test_shrinking_keeps_only_the_faults_the_failure_needs() -> None:
    replays: list[tuple[int, ...]] = []

    def fails(faults: tuple[int, ...]) -> bool:
        replays.append(faults)
        return {3, 7} <= set(faults)

    assert shrink(tuple(range(10)), fails, budget=64) == (3, 7)
    assert len(replays) <= 64


def test_a_failure_without_faults_shrinks_to_nothing() -> None:
    assert shrink((1, 2, 3), lambda faults: True, budget=64) == ()


def test_the_budget_bounds_the_replays() -> None:
    calls = 0

    def fails(faults: tuple[int, ...]) -> bool:
        nonlocal calls
        calls += 1
        return {0, 9} <= set(faults)

    result = shrink(tuple(range(10)), fails, budget=3)
    assert calls <= 4 and {0, 9} <= set(result)


def test_a_deleted_incarnation_never_shows_under_the_name() -> None:
    ledger, records = ledger_of(3)
    ledger.delete_incarnation("t", "A" * 22)
    assert ledger.acked[("t", 0)] == {}
    new = [Record("t", 0, i, f"w{i}".encode()) for i in range(2)]
    for r in new:
        ledger.ack(r)
    assert check(ledger, new, read_committed=True) == []
    # The old record at offset 2 (beyond the new incarnation's end) is found as well.
    assert kinds(check(ledger, [*new, records[2]], read_committed=True)) == [OLD_INCARNATION]


DAY = 86_400_000
NOW = 10 * DAY


def segments(*sizes: int, records: int = 10) -> list[tuple[int, int, int]]:
    return [(i * records, i * records + records - 1, size) for i, size in enumerate(sizes)]


def test_retention_deletes_the_expired_prefix_by_time_and_the_oldest_beyond_the_size() -> None:
    segs = segments(100, 100, 100, 100)
    stamps = {o: NOW - 3 * DAY if o < 15 else NOW for o in range(40)}
    rule = {"retention_ms": DAY, "retention_bytes": -1, "now_ms": NOW, "unknown_expired": False}
    assert retention_prefix(segs, stamps, **rule) == 1  # the second segment holds a fresh record
    rule = {"retention_ms": -1, "retention_bytes": 250, "now_ms": NOW, "unknown_expired": False}
    assert retention_prefix(segs, stamps, **rule) == 2
    both = {"retention_ms": DAY, "retention_bytes": 150, "now_ms": NOW, "unknown_expired": False}
    assert retention_prefix(segs, stamps, **both) == 3


def test_a_retention_pass_is_held_to_its_window() -> None:
    segs = segments(100, 100, 100)
    stamps = {o: NOW - 3 * DAY if o < 10 else NOW for o in range(30)}
    window = {"retention_ms": DAY, "retention_bytes": 250, "started_ms": NOW, "finished_ms": NOW + 1}
    assert check_retention("t", 0, segs, segs[1:], stamps, **window) == ([], 10)
    kept, _ = check_retention("t", 0, segs, segs, stamps, **window)
    assert kinds(kept) == [RETAINED]
    over, _ = check_retention("t", 0, segs, segs[2:], stamps, **window)
    assert kinds(over) == [OVER_DELETED]
    hole, _ = check_retention("t", 0, segs, [segs[0], segs[2]], stamps, **window)
    assert kinds(hole) == [OVER_DELETED]
    # A tier the reconciler's cleanups emptied: only what the stamps keep must be readable (the seed 7
    # round, after the fix that trims what retention expired from the brokers too).
    assert check_retention("t", 0, [], [], stamps, **window) == ([], 10)
    assert check_retention("t", 0, [], [], dict.fromkeys(range(5), NOW - 3 * DAY), **window) == ([], 5)
    assert check_retention("t", 0, [], [], {}, **window) == ([], 0)
