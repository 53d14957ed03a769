"""Replica placements for what-if planning: the ZooKeeper-era round robin and seeded random ones.

KRaft clusters place replicas with a randomised striped placer, so a live cluster's plan must start
from its actual assignment. These generators exist to build known topologies: the round robin is the
one the LINE talk describes (leaders walk the broker list from a start index; followers follow at a
shift that grows by one after every full pass over the brokers), which is what made fetcher counts that
divide the broker count collide.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def round_robin_placement(
    brokers: Sequence[int], partitions: int, replication_factor: int, start_index: int, replica_shift: int
) -> list[list[int]]:
    """Rack-unaware round-robin replica lists, leader first, for partitions 0..partitions-1.

    ``start_index`` picks the first partition's leader position in ``brokers``; ``replica_shift`` is
    the initial follower shift (the old admin tool drew both at random; fixing them makes the result
    reproducible).
    """
    n = len(brokers)
    if not 1 <= replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} needs 1..{n} brokers")
    if partitions < 0 or start_index < 0 or replica_shift < 0:
        raise ValueError("partitions, start_index and replica_shift must be non-negative")
    placement = []
    shift = replica_shift
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            # Followers sit 1..n-1 places after the leader, never on it.
            offset = 1 + (shift + j) % (n - 1)
            replicas.append(brokers[(first + offset) % n])
        placement.append(replicas)
    return placement


def random_placement(
    brokers: Sequence[int], partitions: int, replication_factor: int, rng: random.Random
) -> list[list[int]]:
    """Each partition on ``replication_factor`` distinct brokers drawn uniformly, the first as leader."""
    if not 1 <= replication_factor <= len(brokers):
        raise ValueError(f"replication factor {replication_factor} needs 1..{len(brokers)} brokers")
    return [rng.sample(list(brokers), replication_factor) for _ in range(partitions)]
