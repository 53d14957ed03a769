"""The shortest fault history that still fails: delta debugging (Zeller's ddmin) over a round's faults,
replayed by the caller on fresh topics."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def shrink(items: Sequence[T], fails: Callable[[tuple[T, ...]], bool], *, budget: int = 16) -> tuple[T, ...]:
    """A subsequence of ``items`` for which ``fails`` is still true, 1-minimal when the budget of replays
    allows (every replay is a whole round on the real system, so the budget bounds the cost)."""
    current = tuple(items)
    granularity = 2
    replays = 0
    while len(current) >= 2 and replays < budget:
        size = max(1, len(current) // granularity)
        chunks = [current[i : i + size] for i in range(0, len(current), size)]
        reduced = False
        for index in range(len(chunks)):
            complement = tuple(x for j, chunk in enumerate(chunks) if j != index for x in chunk)
            replays += 1
            if complement and fails(complement):
                current, granularity, reduced = complement, max(granularity - 1, 2), True
                break
            if replays >= budget:
                break
        if not reduced:
            if granularity >= len(current):
                break
            granularity = min(len(current), granularity * 2)
    if len(current) == 1 and replays < budget and fails(()):
        return ()  # the failure needs no fault at all
    return current
