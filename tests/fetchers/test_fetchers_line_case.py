"""The LINE talk's topology: 25 brokers, 40 partitions, RF 3, round-robin placement, 5 fetchers.

Why 5 collides, worked out by hand: leaders walk the 25 brokers, so partitions p and p + 25 (p < 15)
share a leader; the follower shift grows by one after the first pass, so exactly one follower holds
both. 31 * hash + p and 31 * hash + p + 25 differ by 25, a multiple of 5, so that follower fetches
both from the same thread while the leader's other 4 slots idle. 40 - 25 = 15 such groups.
"""

from __future__ import annotations

from storage_core.fetchers.model import Assignment, TopicPartition, partition_threads
from storage_core.fetchers.placement import round_robin_placement
from storage_core.fetchers.planner import evaluate, recommend

BROKERS = list(range(25))
TOPIC = "line-traffic"


def _line() -> Assignment:
    return Assignment(brokers=tuple(BROKERS), topics={TOPIC: round_robin_placement(BROKERS, 40, 3, 0, 0)})


def test_round_robin_matches_the_documented_example() -> None:
    # The 5-broker, 10-partition example table of Kafka's AdminUtils documentation (rack unaware,
    # start index 0): rows are (leader, second replica, third replica).
    table = [
        [0, 1, 2],
        [1, 2, 3],
        [2, 3, 4],
        [3, 4, 0],
        [4, 0, 1],
        [0, 2, 3],
        [1, 3, 4],
        [2, 4, 0],
        [3, 0, 1],
        [4, 1, 2],
    ]
    assert round_robin_placement([0, 1, 2, 3, 4], 10, 3, 0, 0) == table


def test_line_placement_shape() -> None:
    placement = round_robin_placement(BROKERS, 40, 3, 0, 0)
    for p in range(15):
        assert placement[p][0] == placement[p + 25][0]
        assert len(set(placement[p][1:]) & set(placement[p + 25][1:])) == 1


def test_five_fetchers_collide_where_the_talk_says() -> None:
    assignment = _line()
    placement = assignment.topics[TOPIC]
    threads = partition_threads(assignment, 5)
    for p in range(15):
        (shared,) = set(placement[p][1:]) & set(placement[p + 25][1:])
        assert threads[shared][TopicPartition(TOPIC, p)] == threads[shared][TopicPartition(TOPIC, p + 25)]
    report = evaluate(assignment, 5)
    imperfect = [g for b in report.brokers for g in b.groups_detail if not g.perfect]
    assert len(imperfect) == 40 - 25
    assert all(g.partitions == 2 and g.busiest == 2 and g.ideal == 1 for g in imperfect)
    assert report.worst_load == 2
    # Each colliding group uses one thread of its leader's five: four idle beside a doubled one.
    for g in imperfect:
        broker = report.broker(g.follower)
        assert broker.idle_threads >= 4


def test_recommendation_spreads_every_group_perfectly() -> None:
    rec = recommend(_line(), current=5, minimum=1, maximum=16)
    best = rec.recommended
    assert best.fetchers != 5 and 25 % best.fetchers != 0
    assert best.perfect_groups == best.groups == 40 * 2 - 15
    assert best.worst_load == 1
    assert rec.current.perfect_groups == best.groups - 15
    assert any("share fetcher" in line for line in rec.explanations)
