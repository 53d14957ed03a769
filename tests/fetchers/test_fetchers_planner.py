"""Planner figures, the recommendation's tie-breaks and Kafka's dynamic-update step rule."""

from __future__ import annotations

from collections import deque

import pytest

from storage_core.fetchers.model import Assignment, FetcherThread, TopicPartition
from storage_core.fetchers.planner import (
    evaluate,
    is_allowed_step,
    recommend,
    recommendation_dict,
    step_plan,
)

# "t".hashCode() == 116 and 31 * 116 == 3596, so partition p of topic "t" has fetcher hash 3596 + p.
T_BASE = 3596


def _pairs_on_t(pairs: dict[int, tuple[int, ...]], partitions: int, brokers: tuple[int, ...]) -> Assignment:
    """Topic "t": the listed partitions get the listed replicas; the rest sit alone on broker 1."""
    return Assignment(brokers=brokers, topics={"t": [pairs.get(p, (1,)) for p in range(partitions)]})


class TestFigures:
    def test_six_partitions_over_four_fetchers(self) -> None:
        report = evaluate(Assignment(brokers=(1, 2), topics={"t": [(1, 2)] * 6}), 4)
        follower = report.broker(2)
        # fetcher ids 0,1,2,3,0,1: loads 2,2,1,1 over 4 slots.
        assert follower.threads_used == 4 and follower.idle_threads == 0
        assert follower.max_load == 2 and follower.mean_load == pytest.approx(6 / 4)
        assert follower.perfect_groups == follower.groups == 1
        assert report.broker(1).leaders == 0 and report.broker(1).max_load == 0
        assert report.worst_load == 2 and report.worst_broker == 2

    def test_collision_leaves_slots_idle(self) -> None:
        # Partitions 0 and 5: 3596 % 5 == 1, so both hash to fetcher 1 of 5; four slots idle.
        assignment = _pairs_on_t({0: (1, 2), 5: (1, 2)}, 6, (1, 2, 3))
        follower = evaluate(assignment, 5).broker(2)
        assert (follower.threads_used, follower.idle_threads, follower.max_load) == (1, 4, 2)
        assert follower.busiest_thread == FetcherThread(1, (T_BASE + 0) % 5)
        assert follower.perfect_groups == 0
        spread = follower.groups_detail[0]
        assert (spread.busiest, spread.ideal, spread.perfect) == (2, 1, False)

    def test_weighted_loads_follow_byte_rates(self) -> None:
        rates = {TopicPartition("t", p): float(r) for p, r in enumerate([10, 1, 1, 1])}
        assignment = Assignment(brokers=(1, 2), topics={"t": [(1, 2)] * 4}, byte_rates=rates)
        # 3596 is even: fetcher 0 gets partitions 0 and 2 (11), fetcher 1 gets 1 and 3 (2).
        report = evaluate(assignment, 2).broker(2)
        assert report.max_load == 11 and report.busiest_thread == FetcherThread(1, 0)
        assert report.mean_load == pytest.approx(13 / 2)


class TestRecommendation:
    def test_prefers_closest_count_then_coprime_with_broker_count(self) -> None:
        # Partitions 0 and 6 collide only under counts dividing 6. From current 6, counts 5 and 7 are
        # equally close and both spread the pair; 5 shares a factor with the 5 brokers, 7 does not.
        assignment = _pairs_on_t({0: (1, 2), 6: (1, 2)}, 7, (1, 2, 3, 4, 5))
        rec = recommend(assignment, current=6, minimum=1, maximum=16)
        assert rec.current.worst_load == 2
        assert rec.recommended.fetchers == 7 and rec.recommended.worst_load == 1
        assert rec.steps == (7,)

    def test_among_equals_keeps_the_current_count(self) -> None:
        assignment = _pairs_on_t({0: (1, 2)}, 1, (1, 2))
        assert recommend(assignment, current=5, minimum=1, maximum=16).recommended.fetchers == 5

    def test_smaller_count_breaks_the_last_tie(self) -> None:
        # Partitions 0 and 5 collide under 5 (and 1); 4 and 6 both spread them, neither is coprime with 2.
        assignment = _pairs_on_t({0: (1, 2), 5: (1, 2)}, 6, (1, 2))
        assert recommend(assignment, current=5, minimum=1, maximum=16).recommended.fetchers == 4

    def test_bounds_are_respected_and_current_outside_is_still_reported(self) -> None:
        assignment = Assignment(brokers=(1, 2), topics={"t": [(1, 2)] * 40})
        rec = recommend(assignment, current=1, minimum=3, maximum=5)
        assert {c.fetchers for c in rec.candidates} == {3, 4, 5}
        assert rec.current.fetchers == 1 and rec.current.worst_load == 40
        assert rec.recommended.fetchers == 5 and rec.recommended.worst_load == 8
        assert rec.steps == (2, 4, 5)

    def test_explanations_one_line_per_broker(self) -> None:
        assignment = _pairs_on_t({0: (1, 2), 5: (1, 2)}, 6, (1, 2, 3))
        rec = recommend(assignment, current=5)
        assert [line.split(":")[0] for line in rec.explanations] == ["broker 1", "broker 2", "broker 3"]
        assert "share fetcher 1" in rec.explanations[1]
        assert "follows no partition" in rec.explanations[0]

    def test_json_figures(self) -> None:
        assignment = _pairs_on_t({0: (1, 2), 5: (1, 2)}, 6, (1, 2, 3))
        data = recommendation_dict(recommend(assignment, current=5))
        broker2 = next(b for b in data["current"]["brokers"] if b["broker"] == 2)
        assert (broker2["idle_threads"], broker2["max_load"], broker2["mean_load"]) == (4, 2.0, 2 / 5)
        assert data["recommendation"]["fetchers"] == 4 and data["recommendation"]["steps"] == [4]

    @pytest.mark.parametrize("bounds", [(0, 4), (5, 4)])
    def test_rejects_bad_bounds(self, bounds: tuple[int, int]) -> None:
        with pytest.raises(ValueError):
            recommend(_pairs_on_t({}, 1, (1,)), current=1, minimum=bounds[0], maximum=bounds[1])


def _fewest_steps(start: int, target: int, ceiling: int) -> int:
    """Breadth-first search over Kafka's rule, spelled out independently of step_plan."""
    seen = {start: 0}
    queue = deque([start])
    while queue:
        value = queue.popleft()
        if value == target:
            return seen[value]
        for nxt in range(1, ceiling + 1):
            if nxt != value and nxt >= value // 2 and nxt <= 2 * value and nxt not in seen:
                seen[nxt] = seen[value] + 1
                queue.append(nxt)
    raise AssertionError("unreachable")


class TestStepRule:
    def test_integer_halving_rounds_down(self) -> None:
        # 5 // 2 == 2: from 5 Kafka accepts 2 but not 1; from 3 it accepts 1.
        assert is_allowed_step(5, 2) and not is_allowed_step(5, 1)
        assert is_allowed_step(3, 1)
        assert is_allowed_step(1, 2) and not is_allowed_step(1, 3)
        assert not is_allowed_step(2, 0)

    def test_one_to_six(self) -> None:
        assert step_plan(1, 6) == (2, 4, 6)
        assert step_plan(16, 3) == (8, 4, 3)
        assert step_plan(4, 4) == ()

    @pytest.mark.parametrize("start", range(1, 25))
    def test_plans_are_allowed_and_shortest(self, start: int) -> None:
        for target in range(1, 25):
            steps = step_plan(start, target)
            values = (start, *steps)
            assert all(is_allowed_step(a, b) for a, b in zip(values, values[1:]))
            assert values[-1] == target
            assert len(steps) == _fewest_steps(start, target, 64)


class TestPerBroker:
    """recommend_broker: each broker's own count, as num.replica.fetchers is a per-broker config."""

    def test_each_broker_gets_its_own_best_count_never_worse_than_the_cluster_wide_one(self) -> None:
        import random

        from storage_core.fetchers.model import fetch_groups
        from storage_core.fetchers.placement import random_placement
        from storage_core.fetchers.planner import recommend_broker

        rng = random.Random(16)
        for _ in range(20):
            brokers = list(range(1, rng.randint(3, 12) + 1))
            topics = {f"t{i}": random_placement(brokers, rng.randint(5, 60), 3, rng) for i in range(3)}
            assignment = Assignment(brokers=tuple(brokers), topics=topics)
            current = rng.randint(1, 8)
            groups = fetch_groups(assignment)
            cluster = recommend(assignment, current, 1, 8)
            for broker in brokers:
                own = recommend_broker(groups, broker, len(brokers), current, 1, 8)
                # The best of 1..8 for this broker alone: no candidate beats it, and it is never worse
                # than the current count or than the one count the cluster-wide plan would give it.
                loads = [evaluate(assignment, f).broker(broker).max_load for f in range(1, 9)]
                assert own.recommended.max_load == min(loads)
                assert own.recommended.max_load <= own.current.max_load
                assert own.recommended.max_load <= cluster.recommended.broker(broker).max_load
                assert all(
                    is_allowed_step(a, b) for a, b in zip((current, *own.steps), own.steps, strict=False)
                )
