"""Read-ahead for sequential scans of one remote object.

A Kafka consumer reads at about half the disk's speed because it fetches, then decodes, then fetches
again (seed 003). Here the next blocks of the object are already being fetched by worker threads while
the current one is decoded. Memory is bounded by (depth + 1) blocks; blocks behind the reader are dropped.
The prefetcher is a plain range fetcher, so the decoding code does not know it exists.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import KW_ONLY, dataclass, field

DEFAULT_BLOCK = 4 << 20
DEFAULT_DEPTH = 3


@dataclass(eq=False, slots=True)
class SequentialPrefetcher:
    """``(start, end) -> bytes`` over ``[origin, size)`` of an object, fetching ``depth`` blocks ahead."""

    get_range: Callable[[int, int], bytes]
    size: int
    executor: Executor
    _: KW_ONLY
    origin: int = 0
    block: int = DEFAULT_BLOCK
    depth: int = DEFAULT_DEPTH
    _blocks: dict[int, Future[bytes]] = field(default_factory=dict, init=False, repr=False)

    def _span(self, k: int) -> tuple[int, int]:
        start = self.origin + k * self.block
        return start, min(start + self.block, self.size)

    def _ensure(self, k: int) -> None:
        if k not in self._blocks and self._span(k)[0] < self.size:
            start, end = self._span(k)
            self._blocks[k] = self.executor.submit(self.get_range, start, end)

    def __call__(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        if end <= start:
            return b""
        if start < self.origin:
            return self.get_range(start, end)
        first = (start - self.origin) // self.block
        last = (end - 1 - self.origin) // self.block
        for k in [k for k in self._blocks if k < first]:
            self._blocks.pop(k).cancel()
        for k in range(first, last + 1 + self.depth):
            self._ensure(k)
        parts = []
        for k in range(first, last + 1):
            data = self._blocks[k].result()
            b_start, _ = self._span(k)
            parts.append(data[max(start, b_start) - b_start : end - b_start])
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        for fut in self._blocks.values():
            fut.cancel()
        self._blocks.clear()
