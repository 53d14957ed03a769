"""Which replica fetcher thread carries each follower partition, computed the way a Kafka broker does.

A follower broker runs one fetcher thread per (leader broker, fetcher id). The fetcher id of a
partition is ``Utils.abs(31 * topic.hashCode() + partition) % num.replica.fetchers`` (Kafka's
AbstractFetcherManager), evaluated with Java int arithmetic: String.hashCode over UTF-16 code units,
32-bit wrap-around, and Kafka's own abs that maps Integer.MIN_VALUE to 0 (java.lang.Math.abs would
leave it negative). The topic *name* is hashed, never the topic id.

Everything here is a pure function over plain data so planners, the CLI and the operator can call it
on every change of brokers or topics.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

_INT32_MIN = -(2**31)
_UINT32 = 2**32


def to_int32(value: int) -> int:
    """Wrap an arbitrary Python int to a Java int (two's complement, 32 bits)."""
    value &= _UINT32 - 1
    return value - _UINT32 if value >= 2**31 else value


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: ``h = 31 * h + c`` over UTF-16 code units, with int32 wrap-around."""
    data = text.encode("utf-16-le", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        # Masking each step keeps the number small; the final wrap gives the Java sign.
        h = (31 * h + (data[i] | data[i + 1] << 8)) & (_UINT32 - 1)
    return to_int32(h)


def kafka_abs(value: int) -> int:
    """Kafka's Utils.abs: absolute value of an int32, except that Integer.MIN_VALUE maps to 0."""
    return 0 if value == _INT32_MIN else abs(value)


def fetcher_hash(topic: str, partition: int, *, topic_hash: int | None = None) -> int:
    """The non-negative number Kafka reduces modulo num.replica.fetchers for ``topic-partition``."""
    h = java_string_hash(topic) if topic_hash is None else topic_hash
    return kafka_abs(to_int32(31 * h + partition))


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """The fetcher id (0-based) of ``topic-partition`` on a follower with ``num_fetchers`` per leader."""
    if num_fetchers < 1:
        raise ValueError(f"num.replica.fetchers must be at least 1, got {num_fetchers}")
    return fetcher_hash(topic, partition) % num_fetchers


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class FetcherThread(NamedTuple):
    """A follower's fetcher thread: Kafka names it ``ReplicaFetcherThread-<fetcher_id>-<leader>``."""

    leader: int
    fetcher_id: int


@dataclass(frozen=True)
class Assignment:
    """The replica assignment a planner works from.

    ``topics`` maps a topic name to one replica list per partition (list index = partition number);
    the first broker of each list is the partition's current leader, the rest are its followers.
    ``byte_rates`` optionally weights partitions (bytes/s each follower must copy); partitions
    missing from it weigh 0 when any rate is given. Without rates every partition weighs 1.
    """

    brokers: tuple[int, ...]
    topics: Mapping[str, Sequence[Sequence[int]]]
    byte_rates: Mapping[TopicPartition, float] = field(default_factory=dict)

    @property
    def weighted(self) -> bool:
        return bool(self.byte_rates)

    def follower_replicas(self) -> int:
        """How many (partition, follower) pairs exist: the total a fetcher thread count must carry."""
        return sum(max(len(replicas) - 1, 0) for parts in self.topics.values() for replicas in parts)


@dataclass(frozen=True)
class FetchGroup:
    """The partitions one follower copies from one leader: the unit fetcher ids split into threads.

    ``hashes[i]`` is the fetcher hash of ``partitions[i]``; precomputed once so evaluating many
    candidate fetcher counts is only a modulo per partition.
    """

    follower: int
    leader: int
    partitions: tuple[TopicPartition, ...]
    hashes: tuple[int, ...]
    weights: tuple[float, ...] | None

    @property
    def size(self) -> int:
        return len(self.partitions)

    def counts(self, num_fetchers: int) -> list[int]:
        """Partitions per fetcher id (index = fetcher id)."""
        counts = [0] * num_fetchers
        for h in self.hashes:
            counts[h % num_fetchers] += 1
        return counts

    def loads(self, num_fetchers: int) -> list[float]:
        """Load per fetcher id: partition count, or summed byte rate when the assignment is weighted."""
        if self.weights is None:
            return [float(c) for c in self.counts(num_fetchers)]
        buckets: list[list[float]] = [[] for _ in range(num_fetchers)]
        for h, w in zip(self.hashes, self.weights, strict=True):
            buckets[h % num_fetchers].append(w)
        # fsum is exactly rounded, so equal multisets of rates give equal loads whatever the order;
        # the planner compares loads across candidate counts and must not see rounding noise.
        return [math.fsum(b) for b in buckets]


def fetch_groups(assignment: Assignment) -> tuple[FetchGroup, ...]:
    """Group every follower replica by (follower, leader), sorted by follower then leader."""
    members: dict[tuple[int, int], list[tuple[TopicPartition, int]]] = defaultdict(list)
    for topic in sorted(assignment.topics):
        topic_hash = java_string_hash(topic)
        for partition, replicas in enumerate(assignment.topics[topic]):
            if len(replicas) < 2:
                continue
            h = fetcher_hash(topic, partition, topic_hash=topic_hash)
            leader = replicas[0]
            tp = TopicPartition(topic, partition)
            for follower in replicas[1:]:
                members[(follower, leader)].append((tp, h))
    groups = []
    for (follower, leader), entries in sorted(members.items()):
        weights = (
            tuple(float(assignment.byte_rates.get(tp, 0.0)) for tp, _ in entries)
            if assignment.weighted
            else None
        )
        groups.append(
            FetchGroup(
                follower=follower,
                leader=leader,
                partitions=tuple(tp for tp, _ in entries),
                hashes=tuple(h for _, h in entries),
                weights=weights,
            )
        )
    return tuple(groups)


def partition_threads(
    assignment: Assignment, num_fetchers: int
) -> dict[int, dict[TopicPartition, FetcherThread]]:
    """For each follower broker, the fetcher thread that carries each of its follower partitions."""
    if num_fetchers < 1:
        raise ValueError(f"num.replica.fetchers must be at least 1, got {num_fetchers}")
    result: dict[int, dict[TopicPartition, FetcherThread]] = {}
    for group in fetch_groups(assignment):
        threads = result.setdefault(group.follower, {})
        for tp, h in zip(group.partitions, group.hashes, strict=True):
            threads[tp] = FetcherThread(group.leader, h % num_fetchers)
    return result


def thread_partitions(
    assignment: Assignment, num_fetchers: int
) -> dict[int, dict[FetcherThread, tuple[TopicPartition, ...]]]:
    """For each follower broker, the partitions of each fetcher thread that carries any."""
    result: dict[int, dict[FetcherThread, list[TopicPartition]]] = {}
    for follower, threads in partition_threads(assignment, num_fetchers).items():
        per_thread = result.setdefault(follower, {})
        for tp, thread in threads.items():
            per_thread.setdefault(thread, []).append(tp)
    return {
        follower: {thread: tuple(tps) for thread, tps in sorted(per_thread.items())}
        for follower, per_thread in result.items()
    }
