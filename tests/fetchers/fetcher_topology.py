"""A 5-broker topology where Kafka's running fetcher count leaves threads idle, and checks of what the
brokers then did, read from their own logs.

The brokers start with ``num.replica.fetchers=5`` (the broker count, the LINE talk's bad case) and two
empty topics placed round robin with explicit replica lists (KRaft's own placer is random): every broker
follows a few partitions from each leader, so at 5 threads per leader most slots idle while some threads
carry several partitions. The per-broker proposals within 1..16 need one or two steps (e.g. 5 -> 10 ->
12). The topics stay empty so each partition a fetcher thread takes over is logged with its fetcher id
(fetcher_logs).
"""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from fetchers.fetcher_logs import resizes, segments

from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_fetchers import FetcherAdmin
from storage_core.fetchers.model import Assignment, partition_threads
from storage_core.fetchers.placement import round_robin_placement

START_COUNT = 5
BROKER_CONFIG = {"num.replica.fetchers": str(START_COUNT)}
BOUNDS = {"min": 1, "max": 16}
# name -> (partitions, replication factor, start index, shift) of the round robin.
TOPICS = {"line": (25, 2, 0, 0), "orders": (25, 3, 0, 0)}
LATE_TOPIC = ("late-arrivals", 30, 3, 2, 1)


def create_topics(kafka: KafkaCluster, topics: dict[str, tuple[int, int, int, int]]) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    brokers = kafka.node_ids
    new = [
        NewTopic(name, parts, replica_assignment=round_robin_placement(brokers, parts, rf, start, shift))
        for name, (parts, rf, start, shift) in topics.items()
    ]
    for future in admin.create_topics(new).values():
        future.result(60)
    for name, (parts, _, _, _) in topics.items():
        kafka.wait_topic(name, parts)


def follower_replicas(topics: dict[str, tuple[int, int, int, int]]) -> int:
    return sum(parts * (rf - 1) for parts, rf, _, _ in topics.values())


def live_assignment(kafka: KafkaCluster) -> Assignment:
    return FetcherAdmin(kafka.bootstrap_servers).assignment()


def wait_logs_match_model(
    kafka: KafkaCluster,
    counts: dict[int, int],
    topics: dict[str, tuple[int, int, int, int]],
    timeout: float = 240.0,
) -> Assignment:
    """Poll (with a deadline) until every broker's log, since its last resize, shows each of its follower
    partitions on the (leader, fetcher id) the model computes for that broker's count; return the
    assignment. Fails with the differences when the deadline passes first."""
    deadline = time.monotonic() + timeout
    while True:
        assignment = live_assignment(kafka)
        wrong: dict[int, object] = {}
        for broker in kafka.node_ids:
            latest = segments(kafka.server_log(broker))[-1]
            expected = {
                (tp.topic, tp.partition): (t.leader, t.fetcher_id)
                for tp, t in partition_threads(assignment, counts[broker]).get(broker, {}).items()
            }
            if latest.resized_to not in (None, counts[broker]) or latest.truncated != expected:
                missing = {p: t for p, t in expected.items() if latest.truncated.get(p) != t}
                wrong[broker] = (latest.resized_to, dict(list(missing.items())[:5]))
        if assignment.follower_replicas() == follower_replicas(topics) and not wrong:
            return assignment
        if time.monotonic() > deadline:
            raise AssertionError(f"broker logs differ from the model after {timeout}s: {wrong}")
        time.sleep(1.0)


def logged_resizes(kafka: KafkaCluster, broker: int) -> list[tuple[int, int]]:
    return resizes(kafka.server_log(broker))
