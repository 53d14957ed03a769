"""The exactly-once rule the replica tests judge consumer groups by (tests/gateway/delivery_log.py): it
passes a clean read and a re-read from the commit, and names every skip, every re-read from anywhere but
a commit, and a read that stops short or leaves its end uncommitted."""

from __future__ import annotations

from .delivery_log import Committed, Delivered, GroupLog, problems, verifiable_consumer_event

ENDS = {0: 4, 1: 2}
STARTS = {0: 0, 1: 0}


def log(*events: Delivered | Committed) -> GroupLog:
    return GroupLog(list(events))


def read(partition: int, *offsets: int) -> list[Delivered]:
    return [Delivered(partition, o) for o in offsets]


def test_a_clean_read_committed_to_its_ends_passes() -> None:
    events = [*read(0, 0, 1), *read(1, 0, 1), Committed(0, 2, True), *read(0, 2, 3)]
    events += [Committed(0, 4, True), Committed(1, 2, True)]
    assert problems(log(*events), STARTS, ENDS) == []


def test_a_re_read_from_the_last_commit_passes() -> None:
    events = [*read(0, 0, 1), Committed(0, 2, True), *read(0, 2, 3), *read(0, 2, 3), Committed(0, 4, True)]
    events += [*read(1, 0, 1), Committed(1, 2, True)]
    assert problems(log(*events), STARTS, ENDS) == []


def test_a_re_read_from_a_commit_whose_answer_was_lost_passes() -> None:
    events = [*read(0, 0), Committed(0, 1, True), *read(0, 1, 2), Committed(0, 3, False), *read(0, 3)]
    events += [*read(0, 3), Committed(0, 4, True), *read(1, 0, 1), Committed(1, 2, True)]
    assert problems(log(*events), STARTS, ENDS) == []


def test_a_skip_is_named() -> None:
    events = [*read(0, 0, 2, 3), Committed(0, 4, True), *read(1, 0, 1), Committed(1, 2, True)]
    assert problems(log(*events), STARTS, ENDS) == ["event 1: partition 0 skipped 1..1"]


def test_a_re_read_from_below_the_commit_is_named() -> None:
    events = [*read(0, 0, 1, 2), Committed(0, 3, True), *read(0, 1, 2, 3), Committed(0, 4, True)]
    events += [*read(1, 0, 1), Committed(1, 2, True)]
    (problem,) = problems(log(*events), STARTS, ENDS)
    assert problem.startswith("event 4: partition 0 went back to 1 (position 3), not to a commit ([3])")


def test_a_read_short_of_its_end_or_not_committed_is_named() -> None:
    events = [*read(0, 0, 1, 2), Committed(0, 3, True), *read(1, 0, 1)]
    assert problems(log(*events), STARTS, ENDS) == [
        "partition 0 ended at 3, not at its end 4",
        "partition 0: the last commit is not its end 4 ([3])",
        "partition 1: the last commit is not its end 2 ([0])",
    ]


def test_verifiable_consumer_lines_become_events() -> None:
    record = (
        '{"timestamp":1,"name":"record_data","key":null,"value":"v","topic":"t","partition":1,"offset":7}'
    )
    commit = (
        '{"timestamp":2,"name":"offsets_committed","offsets":[{"topic":"t","partition":1,"offset":8},'
        '{"topic":"other","partition":0,"offset":3}],"success":false,"error":"x"}'
    )
    assert verifiable_consumer_event(record, "t") == [Delivered(1, 7)]
    assert verifiable_consumer_event(record, "other") == []
    assert verifiable_consumer_event(commit, "t") == [Committed(1, 8, False)]
    assert verifiable_consumer_event("not json", "t") == []
    assert verifiable_consumer_event('{"name":"partitions_assigned"}', "t") == []
