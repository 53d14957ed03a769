"""The byte-rate limit of copy and rebuild: the token bucket itself, and `tierkeeper copy` held to it."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from harness.kafka import KafkaCluster
from storage_core.formats.segment_files import SegmentFileKind
from storage_core.logdir import LogDir
from storage_core.throttle import RateLimiter, limited

from .conftest import copy_args, run_cli
from .dataset import Dataset
from .private_logdir import copy_partitions, eligible_log_bytes, rolled_log_bytes


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_one_seconds_worth_goes_at_once_then_callers_wait_for_the_rate() -> None:
    t = FakeTime()
    limiter = RateLimiter(1_000, clock=t.clock, sleep=t.sleep)
    assert limiter.acquire(1_000) == 0.0  # the burst
    assert limiter.acquire(500) == pytest.approx(0.5)
    for _ in range(10):
        limiter.acquire(250)
    assert t.now - 100.0 == pytest.approx(3.0)  # 4,000 bytes at 1,000/s, the first 1,000 free


def test_idle_time_refills_at_most_one_second() -> None:
    t = FakeTime()
    limiter = RateLimiter(1_000, clock=t.clock, sleep=t.sleep)
    limiter.acquire(1_000)
    t.now += 60  # a long pause earns no more than a full bucket
    assert limiter.acquire(1_000) == 0.0
    assert limiter.acquire(1_000) == pytest.approx(1.0)


def test_threads_share_one_rate() -> None:
    t = FakeTime()
    lock = threading.Lock()

    def sleep(seconds: float) -> None:  # sleeps add up as if the threads took turns, which the debt enforces
        with lock:
            t.slept.append(seconds)

    limiter = RateLimiter(1_000, clock=t.clock, sleep=sleep)
    threads = [threading.Thread(target=lambda: [limiter.acquire(100) for _ in range(10)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # The clock never moved: the last caller must wait for all 4,000 bytes less the free 1,000.
    assert max(t.slept) == pytest.approx(3.0)


def test_bad_rates_are_refused_and_no_limit_leaves_progress_alone() -> None:
    with pytest.raises(ValueError, match="> 0"):
        RateLimiter(0)
    calls: list[int] = []
    report = calls.append
    assert limited(report, None) is report


def test_copy_is_held_to_its_rate_and_rejects_a_bad_one(
    dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    # The limit counts the .log bytes of the segments copied (rolled, below the checkpointed high watermark).
    log_bytes = eligible_log_bytes(log_dir, [topic])
    assert log_bytes == rolled_log_bytes(log_dir, [topic]) > 0
    rate = log_bytes // 3

    bad = run_cli(*copy_args(log_dir, f"file://{tmp_path / 'bad'}", "--max-bytes-per-second", "0"))
    assert bad.returncode != 0 and "--max-bytes-per-second must be > 0" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "bad").exists()

    started = time.monotonic()
    proc = run_cli(
        *copy_args(log_dir, f"file://{tmp_path / 'remote'}", "--max-bytes-per-second", str(rate), "--json")
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["failed_partitions"] == 0
    # One second's worth goes at once; the other two thirds must take two seconds at least.
    assert elapsed >= (log_bytes - rate) / rate * 0.95, elapsed


@pytest.mark.parametrize("flag", [[], ["--no-fsync"]])
def test_copy_flushes_to_disk_unless_told_not_to(
    dataset: Dataset,
    kafka_broker: KafkaCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flag: list[str],
) -> None:
    """`--no-fsync` tiers the same bytes but leaves them to the page cache (in-process, to watch fsync)."""
    from storage_core.cli.main import main

    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    remote = tmp_path / "remote"
    assert main(copy_args(log_dir, f"file://{remote}", "--json", *flag)) == 0
    rolled = [
        s.path(p.path, SegmentFileKind.LOG)
        for p in LogDir(log_dir).partitions({topic})
        for s in p.segments()[:-1]
    ]
    tiered = {(p.parent.name, p.name[:20]): p.read_bytes() for p in remote.rglob("*.log")}
    assert len(rolled) > 0 and len(tiered) == len(rolled)
    assert all(
        tiered[(path.parent.name.rpartition("-")[2], path.name[:20])] == path.read_bytes() for path in rolled
    )
    # Durable: each segment's data objects and markers, and each manifest; without: none at all.
    assert (len(synced) >= 4 * len(rolled)) if not flag else synced == []
