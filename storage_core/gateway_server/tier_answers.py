"""Read-ahead: where one client connection's tier reads are computed, and the next one prepared before it is
asked (the Fetch handler, gateway_server/handlers/fetch.py, decides which partitions the tier answers and
asks here for their bytes).

A consumer reading history asks next for the offset after the batches it was just served, with the same
limits. After an answer computed on the event loop, the next one is computed there too, once this one has
been written to the client (:meth:`TierAnswers.speculate`), while the client reads it and asks again; after
a miss, the next one is read on a thread meanwhile. A thread's answer is not followed by another thread's,
or the partition would stay on threads (each hand-off waits for the GIL) after the source has caught up.
A prepared answer is used only for exactly the read it expected, within ``PREPARED_FOR_S``, for at most
``MAX_PREPARED`` partitions of a connection.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from storage_core.gateway import fetch as fetch_rules
from storage_core.gateway.history import TierSlice
from storage_core.gateway.ranges import NotReady
from storage_core.gateway_server.context import GatewayContext
from storage_core.remote.layout import TopicPartitionId

MAX_PREPARED = 4
"""Answers read ahead per client connection (each at most the partition's fetch limit, 1 MiB by default)."""
PREPARED_FOR_S = 5.0
"""A prepared answer not asked for within this long is read again (a client that paused; its memory)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Read:
    """One partition's tier read, as :meth:`TierHistory.read` takes it."""

    tp: TopicPartitionId
    offset: int
    budget: int
    min_one: bool
    committed: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _Prepared:
    read: _Read
    answer: asyncio.Future[TierSlice | None]
    at: float
    on_loop: bool
    """Computed on the event loop (then followed by another when used)."""


class TierAnswers:
    """One client connection's tier reads (what it prepared dies with it)."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self._prepared: dict[fetch_rules.PartitionKey, _Prepared] = {}
        self._following: dict[fetch_rules.PartitionKey, _Read] = {}
        """The reads :meth:`speculate` computes next."""

    async def read(
        self,
        key: fetch_rules.PartitionKey,
        tp: TopicPartitionId,
        offset: int,
        budget: int,
        *,
        min_one: bool,
        committed: bool,
    ) -> TierSlice | None:
        """The tier's batches of ``tp`` from ``offset`` within ``budget`` bytes (at least one whole batch
        with ``min_one``), as :meth:`TierHistory.read` answers; ``key`` is the partition as the request
        names it."""
        return await self._read(key, _Read(tp, offset, budget, min_one, committed))

    async def _read(self, key: fetch_rules.PartitionKey, read: _Read) -> TierSlice | None:
        """The answer prepared for exactly ``read``, else one computed on the event loop when memory holds
        it, else on a thread."""
        prepared = self._prepared.pop(key, None)
        if prepared is not None and prepared.read == read and time.monotonic() - prepared.at < PREPARED_FOR_S:
            found = await prepared.answer
            if prepared.on_loop:
                self._follow(key, read, found)
            return found
        try:
            found = self._read_now(read)
        except NotReady:
            pass
        else:
            self._follow(key, read, found)
            return found
        found = await self._submit(read)
        if found is not None and found.records:
            after = dataclasses.replace(read, offset=found.upper_offset)
            self._keep(key, after, self._submit(after), on_loop=False)
        return found

    def speculate(self) -> None:
        """Compute on the event loop the answers :meth:`_read` expects to be asked next. Called once an
        answer has been written (its client is busy reading it): what memory holds is ready when the
        client asks; what it does not is read on a thread meanwhile. A failure is left for the real ask
        to meet (and report) again."""
        following, self._following = self._following, {}
        for key, read in following.items():
            if key in self._prepared:
                continue
            future: asyncio.Future[TierSlice | None] = asyncio.get_running_loop().create_future()
            try:
                future.set_result(self._read_now(read))
            except NotReady:
                self._keep(key, read, self._submit(read), on_loop=False)
                continue
            except Exception:  # noqa: BLE001 - the real ask reads again and reports what it meets
                continue
            self._keep(key, read, future, on_loop=True)

    def _follow(self, key: fetch_rules.PartitionKey, read: _Read, found: TierSlice | None) -> None:
        if found is not None and found.records:
            self._following[key] = dataclasses.replace(read, offset=found.upper_offset)

    def _keep(
        self,
        key: fetch_rules.PartitionKey,
        read: _Read,
        answer: asyncio.Future[TierSlice | None],
        *,
        on_loop: bool,
    ) -> None:
        self._prepared[key] = _Prepared(read, answer, time.monotonic(), on_loop)
        while len(self._prepared) > MAX_PREPARED:  # memory: a few partitions' answers per connection
            del self._prepared[next(iter(self._prepared))]

    def _read_now(self, read: _Read) -> TierSlice | None:
        return self.ctx.history.read(
            read.tp,
            read.offset,
            read.budget,
            min_one=read.min_one,
            read_committed=read.committed,
            nowait=True,
        )

    def _submit(self, read: _Read) -> asyncio.Future[TierSlice | None]:
        future = self.ctx.run_tier(
            self.ctx.history.read,
            read.tp,
            read.offset,
            read.budget,
            min_one=read.min_one,
            read_committed=read.committed,
        )
        # A prepared answer nobody asks for (the client went elsewhere) must not log its failure.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        return future
