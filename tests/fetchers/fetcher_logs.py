"""Read what a broker's log says its replica fetchers did.

Formats learned from a real Kafka 4.1 broker log (INFO):

    [ReplicaFetcherManager on broker 2] Resizing fetcher thread pool size from 2 to 4 (...)
    [ReplicaFetcherManager on broker 2] Added fetcher to broker 3 for partitions HashMap(t-8 -> InitialFetchState(...), ...) (...)
    [ReplicaFetcherThread-1-3]: Starting (...)
    [ReplicaFetcher replicaId=2, leaderId=1, fetcherId=1] Truncating partition t-4 with TruncationState(...) (...)

One "Added fetcher" line is written per (leader, fetcher id) group, but without the fetcher id; the
fetcher thread's own lines carry it. A partition added to a thread starts by truncating, which the
thread logs, as long as the follower's leader-epoch cache is empty (an empty partition): tests that
read fetcher ids from these lines keep their topics empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RESIZE = re.compile(
    r"\[ReplicaFetcherManager on broker (\d+)\] Resizing fetcher thread pool size from (\d+) to (\d+)"
)
ADDED = re.compile(
    r"\[ReplicaFetcherManager on broker (\d+)\] Added fetcher to broker (\d+) for partitions (.*)$"
)
ADDED_PARTITION = re.compile(r"([A-Za-z0-9._-]+)-(\d+) -> InitialFetchState")
STARTING = re.compile(r"\[ReplicaFetcherThread-(\d+)-(\d+)\]: Starting")
TRUNCATING = re.compile(
    r"\[ReplicaFetcher replicaId=(\d+), leaderId=(\d+), fetcherId=(\d+)\] Truncating partition ([A-Za-z0-9._-]+)-(\d+) with"
)

Partition = tuple[str, int]
Thread = tuple[int, int]  # (leader, fetcher id)


@dataclass
class Segment:
    """What a broker logged after one resize (or since it started, when it never resized)."""

    resized_to: int | None
    added: list[tuple[int, frozenset[Partition]]]  # (leader, partitions) per "Added fetcher" line
    started: list[Thread]
    truncated: dict[Partition, Thread]  # the last thread that truncated each partition


def segments(log: str) -> list[Segment]:
    """Split a broker log at its resize lines, oldest first."""
    result = [Segment(None, [], [], {})]
    for line in log.splitlines():
        if m := RESIZE.search(line):
            result.append(Segment(int(m.group(3)), [], [], {}))
        elif m := ADDED.search(line):
            parts = frozenset((t, int(p)) for t, p in ADDED_PARTITION.findall(m.group(3)))
            result[-1].added.append((int(m.group(2)), parts))
        elif m := STARTING.search(line):
            result[-1].started.append((int(m.group(2)), int(m.group(1))))
        elif m := TRUNCATING.search(line):
            result[-1].truncated[(m.group(4), int(m.group(5)))] = (int(m.group(2)), int(m.group(3)))
    return result


def resizes(log: str) -> list[tuple[int, int]]:
    """Every (from, to) resize the broker logged, in order."""
    return [(int(m.group(2)), int(m.group(3))) for m in RESIZE.finditer(log)]
