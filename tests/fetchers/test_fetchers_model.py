"""The fetcher-id formula, checked against values known from Java folklore (and against a real JVM in
test_fetchers_java_oracle.py)."""

from __future__ import annotations

import pytest

from storage_core.fetchers.model import (
    Assignment,
    FetcherThread,
    TopicPartition,
    fetch_groups,
    fetcher_id,
    java_string_hash,
    kafka_abs,
    partition_threads,
    thread_partitions,
)

INT_MIN = -(2**31)


class TestJavaArithmetic:
    def test_well_known_hash_codes(self) -> None:
        # Published String.hashCode values: "hello", the "Aa"/"BB" collision, and the one string
        # famous for hashing to Integer.MIN_VALUE.
        assert java_string_hash("") == 0
        assert java_string_hash("hello") == 99162322
        assert java_string_hash("Aa") == java_string_hash("BB") == 2112
        assert java_string_hash("polygenelubricants") == INT_MIN

    def test_kafka_abs_maps_min_value_to_zero(self) -> None:
        assert kafka_abs(INT_MIN) == 0
        assert kafka_abs(INT_MIN + 1) == 2**31 - 1
        assert kafka_abs(-7) == 7 and kafka_abs(7) == 7

    def test_min_value_topic_lands_on_fetcher_zero(self) -> None:
        # 31 * MIN_VALUE wraps back to MIN_VALUE, so partition 0 hits the MIN_VALUE rule for any count;
        # Java's Math.abs would leave MIN_VALUE and 2**31 % 6 == 2, so 6 tells the two rules apart.
        for count in range(1, 13):
            assert fetcher_id("polygenelubricants", 0, count) == 0
        assert (2**31) % 6 == 2

    def test_rejects_non_positive_counts(self) -> None:
        with pytest.raises(ValueError):
            fetcher_id("t", 0, 0)


def _two_broker_topic(partitions: int) -> Assignment:
    return Assignment(brokers=(1, 2), topics={"t": [(1, 2)] * partitions})


class TestThreadMapping:
    def test_single_letter_topic_by_hand(self) -> None:
        # "t".hashCode() is 116 and 31 * 116 = 3596, a multiple of 4: partition p goes to fetcher p % 4.
        threads = partition_threads(_two_broker_topic(6), 4)
        assert threads == {2: {TopicPartition("t", p): FetcherThread(1, p % 4) for p in range(6)}}

    def test_thread_partitions_groups_by_thread(self) -> None:
        per_thread = thread_partitions(_two_broker_topic(6), 4)[2]
        assert per_thread[FetcherThread(1, 0)] == (TopicPartition("t", 0), TopicPartition("t", 4))
        assert per_thread[FetcherThread(1, 3)] == (TopicPartition("t", 3),)

    def test_leaders_never_fetch_and_rf1_has_no_followers(self) -> None:
        assignment = Assignment(brokers=(1, 2, 3), topics={"a": [(1,), (2, 3, 1)], "b": [()]})
        threads = partition_threads(assignment, 3)
        assert set(threads) == {1, 3}
        assert all(thread.leader == 2 for per in threads.values() for thread in per.values())

    def test_groups_carry_weights_only_when_rates_are_given(self) -> None:
        plain = fetch_groups(_two_broker_topic(2))
        assert plain[0].weights is None and plain[0].loads(2) == [1.0, 1.0]
        weighted = Assignment(
            brokers=(1, 2), topics={"t": [(1, 2), (1, 2)]}, byte_rates={TopicPartition("t", 1): 5.0}
        )
        group = fetch_groups(weighted)[0]
        # 3596 is even: partition 0 on fetcher 0 (rate missing, so 0), partition 1 on fetcher 1.
        assert group.loads(2) == [0.0, 5.0]

    def test_follower_replica_count(self) -> None:
        assignment = Assignment(brokers=(1, 2, 3), topics={"a": [(1, 2, 3), (2,)], "b": [(3, 1)]})
        assert assignment.follower_replicas() == 3
