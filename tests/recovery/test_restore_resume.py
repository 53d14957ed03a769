"""The restore loop crashed at every step of a transaction, then resumed: each record lands once.

The Kafka side is a small in-memory partition log with Kafka's transaction rules (aborted records keep
their offsets, every commit or abort adds a marker, a new session aborts what the last one left open);
the chunk mappings go to a real fsspec memory:// store. The real-broker version of this, with kill -9,
is in test_recover_real_kafka.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from storage_core.adapters.store import RemoteStore
from storage_core.formats.record_batch import TimestampType
from storage_core.formats.records import Record
from storage_core.recovery.mapping import concat_runs
from storage_core.recovery.restore import ChunkLimits, PartitionStart, chunks, record_size, restore_partition
from storage_core.recovery.state import Progress, RecoveryState
from storage_core.throttle import RateLimiter

SOURCE = "S" * 22
TARGET = "T" * 22


class Crash(BaseException):
    """Stands for kill -9: nothing after it runs, nothing catches it as an error."""


@dataclass
class PartitionLog:
    """What the broker keeps for one partition and the restore group across producer sessions."""

    entries: list[tuple[int, Record | None, str]] = field(default_factory=list)
    """(offset, record or None for a marker, 'committed' | 'aborted' | 'open')."""
    committed: tuple[int, Progress] | None = None
    pending_progress: tuple[int, Progress] | None = None

    def next_offset(self) -> int:
        return len(self.entries)

    def end_session(self) -> None:
        """A new producer session fences the old one: its open transaction is aborted."""
        if any(state == "open" for _, _, state in self.entries):
            self.entries = [(o, r, "aborted" if s == "open" else s) for o, r, s in self.entries]
            self.entries.append((self.next_offset(), None, "aborted"))
        self.pending_progress = None

    def read_committed(self) -> list[tuple[int, Record]]:
        return [(o, r) for o, r, s in self.entries if r is not None and s == "committed"]


class FakeSink:
    """RestoreSink over PartitionLog that crashes at the ``crash_at``-th call of one step."""

    def __init__(self, log: PartitionLog, crash_step: str | None = None, crash_at: int = 0) -> None:
        log.end_session()
        self.log = log
        self.crash_step = crash_step
        self.crash_at = crash_at
        self.calls: dict[str, int] = {}

    def _step(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name == self.crash_step and self.calls[name] == self.crash_at:
            raise Crash(name)

    def produce_chunk(self, partition: int, records: Sequence[Record]) -> list[tuple[int, int]]:
        pairs = []
        for record in records:
            offset = self.log.next_offset()
            self.log.entries.append((offset, record, "open"))
            pairs.append((record.offset, offset))
        self._step("produce")
        return pairs

    def commit_chunk(self, partition: int, new_next: int, progress: Progress) -> None:
        self.log.pending_progress = (new_next, progress)
        self._step("before_commit")
        self.log.entries = [(o, r, "committed" if s == "open" else s) for o, r, s in self.log.entries]
        self.log.entries.append((self.log.next_offset(), None, "committed"))
        self.log.committed, self.log.pending_progress = self.log.pending_progress, None
        self._step("after_commit")

    def abort_chunk(self) -> None:
        pass  # like a killed process: the next session aborts what is open


def _source() -> list[Record]:
    """Committed records of an old log with holes where aborted transactions and markers were."""
    out, offset = [], 0
    for i in range(230):
        offset += 1 if i % 17 else 4
        out.append(
            Record(
                offset,
                1_000 + i,
                TimestampType.CREATE_TIME,
                f"k{i}".encode(),
                bytes([i % 256]) * 10,
                (("h", str(i).encode()),),
                0,
                -1,
                -1,
                False,
                False,
                None,
            )
        )
    return out


def _reader(records: list[Record]) -> Callable[[int], Iterator[Record]]:
    def read_from(offset: int) -> Iterator[Record]:
        return iter([r for r in records if r.offset >= offset])

    return read_from


def _run(
    log: PartitionLog,
    state: RecoveryState,
    records: list[Record],
    sink: FakeSink,
    limiter: RateLimiter | None = None,
) -> None:
    start_old, end_old = records[0].offset, records[-1].offset
    progress = log.committed[1] if log.committed else None
    start = PartitionStart(
        0, progress.next_old if progress else start_old, end_old, progress.restored if progress else 0
    )
    restore_partition(
        start,
        SOURCE,
        _reader(records),
        sink,
        state.write_chunk,
        ChunkLimits(records=40),
        limiter,
        lambda n: None,
    )


STEPS = [(step, n) for step in ("produce", "before_commit", "after_commit") for n in (1, 3, 6)]


@pytest.mark.parametrize("step,n", STEPS)
def test_a_crash_at_any_step_then_a_rerun_restores_each_record_once(step: str, n: int) -> None:
    records = _source()
    store = RemoteStore(f"memory://recover-{uuid.uuid4().hex}")
    state = RecoveryState(store, "t", SOURCE, TARGET)
    log = PartitionLog()
    with pytest.raises(Crash):
        _run(log, state, records, FakeSink(log, step, n))
    committed_chunks = n if step == "after_commit" else n - 1
    assert len(log.read_committed()) == min(committed_chunks * 40, len(records))
    _run(log, state, records, FakeSink(log))
    restored = log.read_committed()
    assert [r for _, r in restored] == records
    assert log.committed is not None
    assert log.committed[1].restored == len(records) and log.committed[0] == log.next_offset() - 1
    # The stored chunk mappings chain to exactly where every record went, aborted attempts excluded.
    chain = state.chain(0, records[0].offset, log.committed[1].next_old)
    assert chain is not None
    runs = concat_runs(c.offset_runs() for c in chain)
    mapping = {r.old_start + i: r.new_start + i for r in runs for i in range(r.length)}
    assert mapping == {record.offset: new for new, record in restored}
    # A third run finds nothing to do.
    _run(log, state, records, FakeSink(log))
    assert [r for _, r in log.read_committed()] == records


def test_chunks_respect_both_limits_and_keep_order() -> None:
    records = _source()[:50]
    got = list(chunks(iter(records), ChunkLimits(records=7, bytes=10_000)))
    assert [r for chunk, _ in got for r in chunk] == records
    assert all(len(chunk) <= 7 for chunk, _ in got)
    by_bytes = list(chunks(iter(records), ChunkLimits(records=1000, bytes=40)))
    assert all(size <= 40 for _, size in by_bytes) and len(by_bytes) > 1


def test_the_restore_is_held_to_the_rate_limit() -> None:
    """The command's --max-bytes-per-second limiter is charged every chunk before it is produced: after the
    first second's worth (the limiter's burst), the restore sleeps for the rest at the rate."""
    records = _source()
    total = sum(record_size(r) for r in records)
    rate = total // 5
    now = [0.0]
    slept: list[float] = []
    produced_at: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    class TimedSink(FakeSink):
        def produce_chunk(self, partition: int, chunk: Sequence[Record]) -> list[tuple[int, int]]:
            produced_at.append(now[0])
            return super().produce_chunk(partition, chunk)

    store = RemoteStore(f"memory://recover-{uuid.uuid4().hex}")
    log = PartitionLog()
    _run(
        log,
        RecoveryState(store, "t", SOURCE, TARGET),
        records,
        TimedSink(log),
        RateLimiter(rate, clock=lambda: now[0], sleep=sleep),
    )
    assert [r for _, r in log.read_committed()] == records
    assert sum(slept) == pytest.approx((total - rate) / rate)  # 4 seconds: 5 seconds' worth, 1 of burst
    assert produced_at[-1] == pytest.approx(sum(slept)), (
        "the last chunk waited its turn before it was produced"
    )


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-bytes-per-second", "0", "--max-bytes-per-second must be > 0"),
        ("--transaction-records", "0", "--transaction-records must be >= 1, got 0"),
    ],
)
def test_recover_refuses_a_non_positive_rate_or_count(flag: str, value: str, message: str) -> None:
    from harness.tierkeeper_cli import run_cli

    proc = run_cli(
        "recover",
        "--topic",
        "t",
        "--bootstrap-servers",
        "127.0.0.1:9",
        "--remote",
        f"memory://recover-{uuid.uuid4().hex}",
        flag,
        value,
    )
    assert proc.returncode != 0 and message in proc.stderr
    assert "Traceback" not in proc.stderr
