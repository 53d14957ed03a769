"""iter_checked_batches: CRC checks shared with a helper thread, same batches and errors as iter_batches."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from formats_builders import make_segment

from storage_core.errors import CorruptDataError
from storage_core.formats.checked_batches import iter_checked_batches
from storage_core.formats.record_batch import TruncatedTailError, iter_batches
from storage_core.formats.source import bytes_fetcher


class CountingPool(ThreadPoolExecutor):
    """A real one-thread pool that records which threads ran the submitted checks."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.threads: set[int] = set()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        def run() -> Any:
            self.threads.add(threading.get_ident())
            return fn(*args, **kwargs)

        return super().submit(run)


@pytest.fixture
def pool() -> Iterator[CountingPool]:
    with CountingPool() as p:
        yield p


def _positions(batches: Any) -> list[tuple[int, int]]:
    return [(b.position, b.header.base_offset) for b in batches]


@pytest.mark.parametrize("group_bytes", [1, 5_000, 1 << 30])
def test_same_batches_as_iter_batches(pool: CountingPool, group_bytes: int) -> None:
    segment, layout = make_segment(60)
    want = _positions(iter_batches(bytes_fetcher(segment)))
    got = list(
        iter_checked_batches(bytes_fetcher(segment), 0, pool, group_bytes=group_bytes, chunk_size=4096)
    )
    assert _positions(got) == want == [(p, o) for p, o, _ in layout]
    assert [bytes(b.data) for b in got] == [segment[p : p + len(b.data)] for b, (p, _, _) in zip(got, layout)]
    if group_bytes == 1:
        assert not pool.threads  # one batch per group: checked here, no hand-off
    else:
        assert pool.threads and threading.get_ident() not in pool.threads  # the helper checked some


def test_starts_at_a_batch_position(pool: CountingPool) -> None:
    segment, layout = make_segment(30)
    position = layout[17][0]
    got = _positions(iter_checked_batches(bytes_fetcher(segment), position, pool, group_bytes=3_000))
    assert got == [(p, o) for p, o, _ in layout[17:]]


@pytest.mark.parametrize("damaged", [0, 1, 13, 14, 29])
def test_a_bad_crc_raises_after_the_good_batches_before_it(pool: CountingPool, damaged: int) -> None:
    """Whichever thread checks the damaged batch (first or second half of a group, any group), nothing
    from it on is yielded and the error names its offset."""
    segment, layout = make_segment(30)
    position, offset, _ = layout[damaged]
    broken = bytearray(segment)
    broken[position + 70] ^= 0x01  # inside the CRC-covered records
    seen = []
    with pytest.raises(CorruptDataError) as err:
        for batch in iter_checked_batches(
            bytes_fetcher(bytes(broken)), 0, pool, group_bytes=8_000, path="x.log"
        ):
            seen.append(batch.header.base_offset)
    assert seen == [o for _, o, _ in layout[:damaged]]
    assert err.value.offset == offset
    assert "CRC mismatch" in str(err.value) and "x.log" in str(err.value)


def test_a_torn_tail_raises_after_every_complete_batch(pool: CountingPool) -> None:
    segment, layout = make_segment(12)
    torn = segment + segment[layout[3][0] : layout[4][0]][:40]  # half a header
    seen = []
    with pytest.raises(TruncatedTailError):
        for batch in iter_checked_batches(bytes_fetcher(torn), 0, pool, group_bytes=1 << 30):
            seen.append(batch.header.base_offset)
    assert seen == [o for _, o, _ in layout]
