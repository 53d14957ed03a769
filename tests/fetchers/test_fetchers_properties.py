"""Properties that hold for every assignment: conservation of load and a never-worse recommendation."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from storage_core.fetchers.model import Assignment, TopicPartition, fetch_groups, partition_threads
from storage_core.fetchers.planner import evaluate, is_allowed_step, recommend, step_plan

# utf-8 cannot encode lone surrogates, so names stay valid Python strings; non-BMP characters still
# exercise the UTF-16 surrogate pairs Java hashes.
TOPIC_NAMES = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12)


@st.composite
def assignments(draw: st.DrawFn, weighted: bool = False) -> Assignment:
    brokers = tuple(sorted(draw(st.sets(st.integers(0, 1000), min_size=1, max_size=8))))
    names = draw(st.lists(TOPIC_NAMES, min_size=1, max_size=4, unique=True))
    topics: dict[str, list[tuple[int, ...]]] = {}
    rates: dict[TopicPartition, float] = {}
    for name in names:
        rf = draw(st.integers(1, min(3, len(brokers))))
        count = draw(st.integers(0, 40))
        topics[name] = [tuple(draw(st.permutations(brokers))[:rf]) for _ in range(count)]
        if weighted:
            for p in range(count):
                rates[TopicPartition(name, p)] = draw(st.floats(0, 1e9, allow_nan=False))
    return Assignment(brokers=brokers, topics=topics, byte_rates=rates)


@settings(max_examples=150, deadline=None)
@given(assignments(), st.integers(1, 40))
def test_thread_loads_sum_to_follower_replicas(assignment: Assignment, fetchers: int) -> None:
    total = sum(sum(group.counts(fetchers)) for group in fetch_groups(assignment))
    assert total == assignment.follower_replicas()
    mapped = sum(len(per) for per in partition_threads(assignment, fetchers).values())
    assert mapped == assignment.follower_replicas()
    report = evaluate(assignment, fetchers)
    assert sum(b.partitions for b in report.brokers) == assignment.follower_replicas()
    for broker in report.brokers:
        assert broker.threads_used + broker.idle_threads == broker.leaders * fetchers
        assert broker.max_load >= broker.mean_load


@settings(max_examples=100, deadline=None)
@given(assignments(weighted=True), st.integers(1, 12))
def test_weighted_loads_sum_to_follower_byte_rates(assignment: Assignment, fetchers: int) -> None:
    expected = math.fsum(
        assignment.byte_rates[TopicPartition(t, p)] * (len(replicas) - 1)
        for t, parts in assignment.topics.items()
        for p, replicas in enumerate(parts)
        if replicas
    )
    got = math.fsum(load for group in fetch_groups(assignment) for load in group.loads(fetchers))
    assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-6)


@settings(max_examples=100, deadline=None)
@given(assignments(), st.integers(1, 12), st.integers(1, 12), st.integers(0, 12))
def test_recommendation_never_worse_than_current(
    assignment: Assignment, current: int, low: int, span: int
) -> None:
    minimum, maximum = min(low, current), max(low + span, current)
    rec = recommend(assignment, current, minimum, maximum)
    assert minimum <= rec.recommended.fetchers <= maximum
    assert rec.recommended.worst_load <= rec.current.worst_load
    assert rec.current.worst_load == evaluate(assignment, current).worst_load
    values = (current, *rec.steps)
    assert values[-1] == rec.recommended.fetchers
    assert all(is_allowed_step(a, b) for a, b in zip(values, values[1:]))


@settings(max_examples=60, deadline=None)
@given(assignments(weighted=True), st.integers(1, 10), st.integers(1, 10))
def test_weighted_recommendation_never_worse(assignment: Assignment, current: int, maximum: int) -> None:
    rec = recommend(assignment, current, 1, max(current, maximum))
    assert rec.recommended.worst_load <= rec.current.worst_load


@given(st.integers(1, 10_000), st.integers(1, 10_000))
def test_step_plans_reach_the_target_within_the_rule(start: int, target: int) -> None:
    values = (start, *step_plan(start, target))
    assert values[-1] == target
    assert all(is_allowed_step(a, b) and a != b for a, b in zip(values, values[1:]))
