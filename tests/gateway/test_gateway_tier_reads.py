"""Where a tier answer is computed (storage_core/gateway_server/tier_answers.py): on the event loop when the
source holds the bytes, on a thread after a miss (with the partition's next answer prepared there), and
back on the event loop once the source has caught up, never chained on threads for good; and ahead of the
ask on the event loop once an answer has been written (``speculate``), used only for the very read it
expected and only while fresh."""

from __future__ import annotations

import asyncio
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from storage_core.gateway.addresses import PortRule
from storage_core.gateway.history import TierSlice
from storage_core.gateway.ranges import NotReady
from storage_core.gateway_server import tier_answers
from storage_core.gateway_server.context import GatewayContext
from storage_core.gateway_server.metrics import GatewayMetrics
from storage_core.gateway_server.tier_answers import TierAnswers, _Read
from storage_core.remote.layout import TopicPartitionId

TP = TopicPartitionId("history", "AAAAAAAAAAAAAAAAAAAAAA", 0)
BATCH = 100


class _History:
    """Answers every offset with one 100-offset batch; ``resident`` says whether a read may skip waiting."""

    def __init__(self) -> None:
        self.resident = False
        self.calls: list[tuple[int, bool, str]] = []
        """Appended to from the loop and the pool's threads (list.append is atomic: no lock needed)."""

    def read(
        self,
        tp: TopicPartitionId,
        offset: int,
        budget: int,
        *,
        min_one: bool,
        read_committed: bool,
        nowait: bool = False,
    ) -> TierSlice:
        self.calls.append((offset, nowait, threading.current_thread().name))
        if nowait and not self.resident:
            raise NotReady(str(tp))
        return TierSlice(b"x" * BATCH, 0, (), offset + BATCH)


def _answers(pool: ThreadPoolExecutor, history: _History) -> TierAnswers:
    ctx = GatewayContext(
        rule=PortRule("127.0.0.1", 9092, 9093),
        bootstrap=[],
        history=history,  # type: ignore[arg-type]
        tier_pool=pool,
        metrics=GatewayMetrics(),
    )
    return TierAnswers(ctx)


def _at(offset: int, budget: int = 1 << 20) -> _Read:
    return _Read(TP, offset, budget, True, False)


def test_the_next_answer_is_computed_on_the_loop_after_the_write_and_used_only_for_its_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    history = _History()
    history.resident = True
    key: Any = (uuid.UUID(int=1), 0)
    with ThreadPoolExecutor(2, thread_name_prefix="tier") as pool:
        answers = _answers(pool, history)

        async def scenario() -> list[int]:
            uppers = []
            for read in (_at(0), _at(100)):  # the second is the one computed ahead
                found = await answers._read(key, read)
                assert found is not None
                uppers.append(found.upper_offset)
                answers.speculate()  # the session calls this once the answer is written
            # The client asks something else (a seek, other limits): the answer ahead is not used.
            found = await answers._read(key, _at(200, budget=512))
            assert found is not None
            uppers.append(found.upper_offset)
            answers.speculate()
            # An answer ahead that waited too long is read again.
            monkeypatch.setattr(tier_answers, "PREPARED_FOR_S", 0.0)
            found = await answers._read(key, _at(300, budget=512))
            assert found is not None
            uppers.append(found.upper_offset)
            return uppers

        assert asyncio.run(scenario()) == [100, 200, 300, 400]
    loop_thread = threading.main_thread().name
    assert {t for _, _, t in history.calls} == {loop_thread}
    # Offsets read: 0 asked; 100 ahead (then served from memory); 200 ahead, then asked with other limits;
    # 300 ahead, then asked after the answer went stale.
    assert [o for o, _, _ in history.calls] == [0, 100, 200, 200, 300, 300]
    assert all(nowait for _, nowait, _ in history.calls)


def test_an_answer_ahead_that_misses_is_read_on_a_thread_and_not_followed_there() -> None:
    history = _History()
    history.resident = True
    key: Any = (uuid.UUID(int=1), 0)
    with ThreadPoolExecutor(2, thread_name_prefix="tier") as pool:
        answers = _answers(pool, history)

        async def scenario() -> None:
            assert await answers._read(key, _at(0)) is not None
            history.resident = False  # the next range is not in memory yet
            answers.speculate()  # -> read on a thread
            found = await answers._read(key, _at(100))
            assert found is not None and found.upper_offset == 200
            answers.speculate()  # a thread's answer is not followed: nothing computed ahead
            assert answers._prepared == {}

        asyncio.run(scenario())
    loop_thread = threading.main_thread().name
    assert [(o, w, t == loop_thread) for o, w, t in history.calls] == [
        (0, True, True),
        (100, True, True),
        (100, False, False),
    ]


def test_a_miss_goes_to_a_thread_prepares_the_next_answer_then_the_loop_serves_again() -> None:
    history = _History()
    with ThreadPoolExecutor(2, thread_name_prefix="tier") as pool:
        answers = _answers(pool, history)
        key: Any = (uuid.UUID(int=1), 0)

        async def scenario() -> list[int]:
            served = []
            found = await answers._read(key, _at(0))  # nothing resident: a thread, and 100 prepared
            assert found is not None
            served.append(found.upper_offset)
            history.resident = True  # the source has read ahead meanwhile
            found = await answers._read(key, _at(100))  # the prepared answer, and no other prepared
            assert found is not None
            served.append(found.upper_offset)
            found = await answers._read(key, _at(200))  # from memory, on the event loop
            assert found is not None
            served.append(found.upper_offset)
            return served

        assert asyncio.run(scenario()) == [100, 200, 300]
    loop_thread = threading.main_thread().name
    assert [(o, w) for o, w, _ in history.calls] == [(0, True), (0, False), (100, False), (200, True)]
    assert [t == loop_thread for _, _, t in history.calls] == [True, False, False, True]
