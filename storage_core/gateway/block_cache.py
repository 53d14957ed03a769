"""A bounded cache of fixed-size blocks of remote segment objects, with read-ahead.

Fetches of history are sequential per partition: a consumer asks for the bytes after the ones it was just
served. Waiting for each block only when it is asked for halves a consumer's speed (seed 003), so after a
read the next ``readahead`` blocks are fetched in the background. Memory is bounded by ``max_bytes``
(least recently used blocks go first); a block being fetched is shared by every reader that wants it.
The cache sees only a ``(key, start, end) -> bytes`` fetcher, never the store.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor, Future

from storage_core.gateway.ranges import NotReady

Fetch = Callable[[str, int, int], bytes]


class BlockCache:
    def __init__(
        self,
        fetch: Fetch,
        executor: Executor,
        *,
        block_bytes: int = 1 << 20,
        max_bytes: int = 64 << 20,
        readahead: int = 4,
    ) -> None:
        self._fetch = fetch
        self._executor = executor
        self.block_bytes = block_bytes
        self.max_bytes = max_bytes
        self.readahead = readahead
        self._blocks: OrderedDict[tuple[str, int], Future[bytes]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self._on_hit: Callable[[bool], None] | None = None

    def observe(self, on_hit: Callable[[bool], None]) -> None:
        """Call ``on_hit(True|False)`` for each block asked for (metrics)."""
        self._on_hit = on_hit

    def read(self, key: str, start: int, end: int, size: int, *, nowait: bool = False) -> bytes:
        """Bytes ``[start, end)`` of the object ``key`` of ``size`` bytes (``end`` is cut to the size), and
        read-ahead of the blocks after them. ``nowait``: :class:`NotReady` unless every block is fetched
        (the fetches are started, so a later read finds them)."""
        end = min(end, size)
        if end <= start:
            return b""
        first, last = start // self.block_bytes, (end - 1) // self.block_bytes
        futures = [self._block(key, k, size, wanted=True) for k in range(first, last + 1)]
        for k in range(last + 1, last + 1 + self.readahead):
            if k * self.block_bytes < size:
                self._block(key, k, size, wanted=False)
        if nowait and not all(f.done() for f in futures):
            raise NotReady(key)
        parts = []
        for k, future in zip(range(first, last + 1), futures, strict=True):
            try:
                data = future.result()
            except BaseException:
                self._forget(key, k, future)  # a failed fetch is not cached: the next read tries again
                raise
            base = k * self.block_bytes
            parts.append(data[max(start, base) - base : end - base])
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _block(self, key: str, k: int, size: int, *, wanted: bool) -> Future[bytes]:
        with self._lock:
            future = self._blocks.get((key, k))
            if future is not None:
                self._blocks.move_to_end((key, k))
                if wanted:
                    self.hits += 1
            else:
                if wanted:
                    self.misses += 1
                start = k * self.block_bytes
                future = self._executor.submit(self._fetch, key, start, min(start + self.block_bytes, size))
                self._blocks[(key, k)] = future
                # Blocks count at full size, fetched or not: the bound holds while fetches are in flight.
                while len(self._blocks) * self.block_bytes > self.max_bytes and len(self._blocks) > 1:
                    self._blocks.popitem(last=False)
        if wanted and self._on_hit is not None:
            self._on_hit(future.done())
        return future

    def _forget(self, key: str, k: int, future: Future[bytes]) -> None:
        with self._lock:
            if self._blocks.get((key, k)) is future:
                del self._blocks[(key, k)]

    @property
    def resident_bytes(self) -> int:
        with self._lock:
            return len(self._blocks) * self.block_bytes
