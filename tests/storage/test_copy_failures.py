"""Bad input and killed processes: a corrupted segment, an unreachable bucket, SIGKILL mid-copy.

Nothing partial may ever become readable, other partitions keep tiering, and a re-run completes.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from harness.kafka import KafkaCluster
from harness.ports import free_ports
from storage_core.adapters.store import RemoteStore
from storage_core.errors import RemoteStoreError
from storage_core.faults import ENV
from storage_core.formats.record_batch import HEADER_SIZE, iter_batch_headers
from storage_core.logdir import LogDir
from storage_core.remote.catalog import PartitionCatalog, list_partitions, list_topics
from storage_core.remote.layout import RemoteLayout
from storage_core.tiering import partition_copy
from storage_core.tiering.partition_copy import copy_partition
from storage_core.tiering.plan import CopyTask

from .conftest import copy_args, run_cli
from .dataset import Dataset
from .private_logdir import copy_partitions
from .tier_checks import finished_segments_complete, read_offsets, rolled_segments


def _file_store(path: Path) -> RemoteStore:
    return RemoteStore(f"file://{path}")


def test_corrupted_segment_is_refused_and_other_partitions_still_tier(
    dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = dataset.codec_topics[0]  # uncompressed
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    bases = rolled_segments(log_dir, topic, 0)
    victim = log_dir / f"{topic}-0" / f"{bases[2]:020d}.log"
    data = bytearray(victim.read_bytes())
    batches = list(iter_batch_headers(io.BytesIO(bytes(data))))
    hit = batches[len(batches) // 2]
    # Inside the records, which the CRC covers (the leader epoch in the header is outside it, as in Kafka).
    flip_at = hit[0] + HEADER_SIZE + (hit[1].size_in_bytes - HEADER_SIZE) // 2
    data[flip_at] ^= 0x40
    victim.write_bytes(bytes(data))

    remote = tmp_path / "remote"
    proc = run_cli(*copy_args(log_dir, f"file://{remote}"))
    assert proc.returncode != 0
    assert f"topic={topic}" in proc.stderr and "partition=0" in proc.stderr
    assert f"offset={hit[1].base_offset}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr

    finished = finished_segments_complete(_file_store(remote), log_dir)
    assert finished[(topic, 0)] == bases[:2], "only the segments before the damage may be tiered"
    assert finished[(topic, 1)] == rolled_segments(log_dir, topic, 1), "the healthy partition must tier fully"
    store = RemoteStore(f"file://{remote}")
    layout = RemoteLayout(store.root)
    tp = next(t for t in list_partitions(store, layout, *list_topics(store, layout)[0]) if t.partition == 0)
    leftovers = [
        e
        for e in PartitionCatalog(store, layout, tp).listing().segments.values()
        if e.base_offset == bases[2]
    ]
    assert leftovers == [], "a refused segment leaves nothing behind"


def test_unreachable_bucket_fails_with_one_line(
    dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    closed_port = free_ports(1)[0]
    started = time.monotonic()
    proc = run_cli(
        *copy_args(
            log_dir,
            "s3://nowhere/prefix",
            "--endpoint-url",
            f"http://127.0.0.1:{closed_port}",
            "--path-style",
        ),
        env={"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_MAX_ATTEMPTS": "2"},
        timeout=240,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tierkeeper copy: error:")]
    assert lines and all("127.0.0.1" in line or "connect" in line.lower() for line in lines), proc.stderr
    assert "y" not in proc.stderr.split(), "credentials must never be printed"
    assert time.monotonic() - started < 240


def _copy_process(log_dir: Path, remote: Path, fault: str | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, ENV: fault} if fault else {k: v for k, v in os.environ.items() if k != ENV}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "storage_core.cli",
            *copy_args(log_dir, f"file://{remote}", "--parallelism", "2"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )


_COPY_POINTS = ("copy.segment.started", "copy.log.stored", "copy.segment.finished")


@pytest.mark.slow
def test_sigkill_never_leaves_readable_partial_data(
    dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    expected = {p: rolled_segments(log_dir, topic, p) for p in (0, 1)}
    total = sum(len(bases) for bases in expected.values())
    assert total >= 6, "the trials need several segments per partition"
    assert _copy_process(log_dir, tmp_path / "full").wait(120) == 0
    full_offsets = {p: read_offsets(_file_store(tmp_path / "full"), topic, p) for p in (0, 1)}
    for p in (0, 1):
        assert full_offsets[p] == list(range(len(full_offsets[p])))

    def check(remote: Path, what: str) -> None:
        finished = finished_segments_complete(_file_store(remote), log_dir) if remote.exists() else {}
        for p in (0, 1):
            bases = finished.get((topic, p), [])
            assert bases == expected[p][: len(bases)], f"{what}: finished segments must be a gap-free prefix"
            offsets = read_offsets(_file_store(remote), topic, p) if bases else []
            assert offsets == full_offsets[p][: len(offsets)], f"{what}: every readable offset once, in order"

    # Each trial kills a fresh copy at a named point (storage_core/faults.py) on its n-th pass, so the
    # kill lands inside the copy by construction: the first, a middle and the last segment, at each step.
    trials = [(point, n) for point in _COPY_POINTS for n in sorted({1, (total + 1) // 2, total})]
    for trial, (point, n) in enumerate(trials):
        remote = tmp_path / f"remote-{trial}"
        fault = f"{point}:{n}"
        assert _copy_process(log_dir, remote, fault).wait(120) == -signal.SIGKILL, f"{fault}: not killed"
        check(remote, fault)
        assert _copy_process(log_dir, remote).wait(120) == 0
        for p in (0, 1):
            assert read_offsets(_file_store(remote), topic, p) == full_offsets[p], fault
        finished_segments_complete(_file_store(remote), log_dir)

    # One remote killed again and again, as a crash-looping Job would be: every run is killed at its
    # first pass of a point (so it makes at most one segment of progress per partition), then a clean run.
    shared = tmp_path / "shared-remote"
    for attempt in range(2 * len(_COPY_POINTS)):
        fault = f"{_COPY_POINTS[attempt % len(_COPY_POINTS)]}:1"
        assert _copy_process(log_dir, shared, fault).wait(120) == -signal.SIGKILL, f"{fault}: not killed"
        check(shared, f"crash loop {attempt} ({fault})")
    assert _copy_process(log_dir, shared).wait(120) == 0
    for p in (0, 1):
        assert read_offsets(_file_store(shared), topic, p) == full_offsets[p]
    finished_segments_complete(_file_store(shared), log_dir)
    os.sync()


def test_transactional_data_needs_the_last_stable_offset(
    dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    """Without a broker to ask for the LSO, the checkpointed high watermark may only stand in for
    partitions without transactions: the transactional partition is refused, the plain one tiers."""
    plain = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [dataset.txn_topic, plain], tmp_path / "logs")
    remote = tmp_path / "remote"
    proc = run_cli(*copy_args(log_dir, f"file://{remote}"))
    assert proc.returncode == 1
    assert f"{dataset.txn_topic}-0" in proc.stderr and "--bootstrap-servers" in proc.stderr
    finished = finished_segments_complete(_file_store(remote), log_dir)
    assert finished.get((dataset.txn_topic, 0), []) == []
    assert finished[(plain, 0)] == rolled_segments(log_dir, plain, 0)


_REMOTE_INDEXES = (".remoteLogIndex", ".remoteOffsetIndex", ".remoteTimeIndex")
_GATE_TIMEOUT_S = 60.0  # only ever waited out when the product does not overlap as it should


def _base_of(key: str) -> int:
    return int(key.rsplit("/", 1)[-1][:20])


class _SlowSmallWrites(RemoteStore):
    """The S3 store (moto) with small-object writes that take 50 ms longer, as over a real network; it
    records when each small write and each .log upload ran, and fails the small writes ``fails`` picks.

    Orderings a test asserts are made to happen by gates, not by timing: with ``pair_small_writes`` the
    first two companion writes of a segment wait for each other and for the segment's .log to have begun,
    and the .log upload does not return before they met (a copy that wrote them one at a time, or before
    or after the .log, would wait out the gate and fail the test); with ``finish_after_next_log`` the
    remote indexes of a segment (written while it is finished) wait until the next segment's .log has
    begun (the last segment's do not wait)."""

    def __init__(
        self,
        url: str,
        options: dict[str, Any],
        fails: Callable[[str], bool] = lambda _key: False,
        delay: float = 0.05,
        *,
        pair_small_writes: bool = False,
        finish_after_next_log: list[int] | None = None,
    ) -> None:
        super().__init__(url, options)
        self.fails = fails
        self.delay = delay
        self.pair_small_writes = pair_small_writes
        self.finish_after_next_log = finish_after_next_log
        self._lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.small_spans: list[tuple[float, float]] = []
        self.log_spans: list[tuple[float, float]] = []
        self.spans_by_key: dict[str, tuple[float, float]] = {}
        self.log_begun: dict[int, threading.Event] = {}
        self.pairs: dict[int, threading.Barrier] = {}
        self.pairs_met: dict[int, threading.Event] = {}
        self.companions_begun: dict[int, int] = {}
        self.gates_waited_out: list[str] = []

    def _event(self, base: int) -> threading.Event:
        with self._lock:
            return self.log_begun.setdefault(base, threading.Event())

    def _met(self, base: int) -> threading.Event:
        with self._lock:
            return self.pairs_met.setdefault(base, threading.Event())

    def _pair(self, base: int) -> threading.Barrier | None:
        """The barrier the first two companion writes of a segment meet at (None for later ones)."""
        with self._lock:
            self.companions_begun[base] = self.companions_begun.get(base, 0) + 1
            if self.companions_begun[base] > 2:
                return None
            return self.pairs.setdefault(base, threading.Barrier(2, timeout=_GATE_TIMEOUT_S))

    def _wait(self, event: threading.Event, what: str) -> None:
        if not event.wait(_GATE_TIMEOUT_S):
            self.gates_waited_out.append(what)

    def put_from_file(
        self, key: str, source: BinaryIO, size: int, inspect: Callable[[memoryview], None]
    ) -> int:
        started = time.monotonic()
        base = _base_of(key)
        self._event(base).set()
        try:
            written = super().put_from_file(key, source, size, inspect)
            if self.pair_small_writes:
                self._wait(self._met(base), f"{key}: no two companion writes met while it went up")
            return written
        finally:
            self.log_spans.append((started, time.monotonic()))
            self.spans_by_key[key] = self.log_spans[-1]

    def put_atomic(self, key: str, data: bytes) -> None:
        started = time.monotonic()
        super().put_atomic(key, data)
        self.spans_by_key[key] = (started, time.monotonic())

    def put_chunks(self, key: str, chunks: Iterable[bytes]) -> int:
        if key.endswith(".log"):  # the segment itself (put_from_file streams it through here)
            return super().put_chunks(key, chunks)
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        started = time.monotonic()
        try:
            self._gate(key)
            time.sleep(self.delay)
            if self.fails(key):
                raise RemoteStoreError(f"upload {key}: injected failure")
            return super().put_chunks(key, chunks)
        finally:
            with self._lock:
                self.in_flight -= 1
                self.small_spans.append((started, time.monotonic()))
                self.spans_by_key[key] = self.small_spans[-1]

    def _gate(self, key: str) -> None:
        base = _base_of(key)
        order = self.finish_after_next_log
        if order is not None and key.endswith(_REMOTE_INDEXES) and order.index(base) + 1 < len(order):
            self._wait(self._event(order[order.index(base) + 1]), f"{key}: next .log never began")
        if self.pair_small_writes and not key.endswith(_REMOTE_INDEXES):
            self._wait(self._event(base), f"{key}: its .log never began")
            pair = self._pair(base)
            if pair is not None:
                try:
                    pair.wait()
                    self._met(base).set()
                except threading.BrokenBarrierError:
                    self.gates_waited_out.append(f"{key}: no second companion write beside it")

    def logs_overlapped_by_small_writes(self) -> int:
        return sum(
            any(s < log_end and e > log_start for s, e in self.small_spans)
            for log_start, log_end in self.log_spans
        )

    def assert_nothing_running(self) -> None:
        """After a copy returned: no write is running and no thread of the copy is left that could start
        one, so what the store holds now is final (a deterministic check instead of sleeping first)."""
        assert self.in_flight == 0, "a write was still running after the copy returned"
        left = [t.name for t in threading.enumerate() if t.name.startswith(_COPY_THREADS)]
        assert left == [], f"copy threads outlived the copy: {left}"


_COPY_THREADS = ("tierkeeper-companion", "tierkeeper-segment", "tierkeeper-finish", "tierkeeper-upload")


def _active_base(log_dir: Path, topic: str) -> int:
    """Base offset of partition 0's active segment: the end of what can be tiered (a plain topic)."""
    return LogDir(log_dir).partitions({topic})[0].segments()[-1].base_offset


def _copy_task(
    log_dir: Path, topic: str, store: RemoteStore, segments_in_flight: int | None = None
) -> CopyTask:
    """Partition 0 of ``topic``, every rolled segment eligible."""
    return CopyTask(
        log_dir=str(log_dir),
        topic=topic,
        partition=0,
        remote_url=store.url,
        storage_options=store.storage_options,
        last_stable_offset=_active_base(log_dir, topic),
        high_watermark=None,
        segments_in_flight=segments_in_flight,
    )


def test_small_objects_go_up_beside_the_log_on_an_object_store(
    dataset: Dataset, kafka_broker: KafkaCluster, s3_bucket: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    bases = rolled_segments(log_dir, topic, 0)
    store = _SlowSmallWrites(*s3_bucket, pair_small_writes=True)
    assert store.write_concurrency > 1 and RemoteStore(f"file://{tmp_path}").write_concurrency == 1
    result = copy_partition(_copy_task(log_dir, topic, store), store)
    assert result.error is None and result.copied_bases == bases and len(bases) >= 3
    assert store.most_in_flight >= 2, "the small objects of a segment should be written side by side"
    assert store.logs_overlapped_by_small_writes() == len(bases), "and while each .log goes up"
    assert store.gates_waited_out == []
    assert finished_segments_complete(store, log_dir)[(topic, 0)] == bases
    assert read_offsets(store, topic, 0) == list(range(_active_base(log_dir, topic)))


def test_a_failed_small_object_write_fails_its_segment_and_leaves_nothing(
    dataset: Dataset, kafka_broker: KafkaCluster, s3_bucket: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    bases = rolled_segments(log_dir, topic, 0)
    victim = f"/{bases[1]:020d}-"

    def fails(key: str) -> bool:  # the second segment's time index; its other small objects are in flight
        return victim in key and key.endswith(".timeindex")

    store = _SlowSmallWrites(*s3_bucket, fails)
    result = copy_partition(_copy_task(log_dir, topic, store), store)
    assert result.error is not None and "injected failure" in result.error
    assert result.copied_bases == bases[:1]
    store.assert_nothing_running()
    assert finished_segments_complete(store, log_dir)[(topic, 0)] == bases[:1]
    layout = RemoteLayout(store.root)
    tp = list_partitions(store, layout, *list_topics(store, layout)[0])[0]
    left = [
        e
        for e in PartitionCatalog(store, layout, tp).listing().segments.values()
        if e.base_offset == bases[1]
    ]
    assert left == [], "the failed attempt's objects and marker are removed"
    again = RemoteStore(store.url, store.storage_options)
    rerun = copy_partition(_copy_task(log_dir, topic, again), again)
    assert rerun.error is None and rerun.copied_bases == bases[1:]


def _span(store: _SlowSmallWrites, base: int, ext: str) -> tuple[float, float]:
    return next(
        span for key, span in store.spans_by_key.items() if f"/{base:020d}-" in key and key.endswith(ext)
    )


def test_a_segment_is_finished_while_the_next_one_goes_up(
    dataset: Dataset, kafka_broker: KafkaCluster, s3_bucket: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    bases = rolled_segments(log_dir, topic, 0)
    store = _SlowSmallWrites(*s3_bucket, finish_after_next_log=bases)
    result = copy_partition(_copy_task(log_dir, topic, store), store)
    assert result.error is None and result.copied_bases == bases and len(bases) >= 3
    assert store.gates_waited_out == [], "each segment's .log should go up while the one before is finished"
    for before, after in zip(bases, bases[1:]):
        # The remote indexes of a segment wait for the next segment's .log to begin (a gate, not a
        # delay), and COPY_FINISHED follows them, so the order below holds whatever the machine's speed.
        assert _span(store, after, ".log")[0] < _span(store, before, "COPY_FINISHED.json")[0], (
            f"segment {after}'s .log should go up while segment {before} is finished"
        )
    assert finished_segments_complete(store, log_dir)[(topic, 0)] == bases
    assert read_offsets(store, topic, 0) == list(range(_active_base(log_dir, topic)))


def _segment_entries(store: RemoteStore, base: int) -> list[Any]:
    layout = RemoteLayout(store.root)
    tp = list_partitions(store, layout, *list_topics(store, layout)[0])[0]
    return [
        e for e in PartitionCatalog(store, layout, tp).listing().segments.values() if e.base_offset == base
    ]


@pytest.mark.parametrize("in_flight", [1, 2])
@pytest.mark.parametrize("next_one_corrupt", [False, True])
def test_when_finishing_a_segment_fails_the_next_one_is_removed_too(
    dataset: Dataset,
    kafka_broker: KafkaCluster,
    s3_bucket: tuple[str, dict[str, Any]],
    tmp_path: Path,
    next_one_corrupt: bool,
    in_flight: int,
) -> None:
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    bases = rolled_segments(log_dir, topic, 0)
    if next_one_corrupt:  # the next segment fails too, in its own half: the earlier failure is reported
        victim = log_dir / f"{topic}-0" / f"{bases[2]:020d}.log"
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0x40
        victim.write_bytes(bytes(data))

    def fails(key: str) -> bool:  # written when segment 1 is finished, while segment 2 goes up
        return f"/{bases[1]:020d}-" in key and key.endswith(".remoteOffsetIndex")

    store = _SlowSmallWrites(*s3_bucket, fails)
    result = copy_partition(_copy_task(log_dir, topic, store, in_flight), store)
    assert result.error is not None and "injected failure" in result.error, result.error
    assert result.copied_bases == bases[:1]
    store.assert_nothing_running()
    assert finished_segments_complete(store, log_dir)[(topic, 0)] == bases[:1]
    for base in bases[1:]:
        assert _segment_entries(store, base) == [], (
            f"segment {base}: the failed segment and every one started after it are removed"
        )
    if next_one_corrupt:
        return
    again = RemoteStore(store.url, store.storage_options)
    rerun = copy_partition(_copy_task(log_dir, topic, again, in_flight), again)
    assert rerun.error is None and rerun.copied_bases == bases[1:]
    assert read_offsets(again, topic, 0) == list(range(_active_base(log_dir, topic)))


class _PairedLogs(RemoteStore):
    """A file:// store whose first two .log copies each wait until the other one has begun: a copy that
    stores one segment at a time fails here (the wait times out) instead of passing."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.meet = threading.Barrier(2, timeout=30)
        self._lock = threading.Lock()
        self.logs_begun = 0
        self.in_flight = 0
        self.most_in_flight = 0

    def put_from_file(
        self, key: str, source: BinaryIO, size: int, inspect: Callable[[memoryview], None]
    ) -> int:
        with self._lock:
            self.logs_begun += 1
            pair = self.logs_begun <= 2
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if pair:
                self.meet.wait()
            return super().put_from_file(key, source, size, inspect)
        finally:
            with self._lock:
                self.in_flight -= 1


def test_two_segments_are_stored_at_once_on_a_local_filesystem(
    dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    bases = rolled_segments(log_dir, topic, 0)
    store = _PairedLogs(f"file://{tmp_path / 'remote'}")
    assert store.segments_in_flight == 2
    result = copy_partition(_copy_task(log_dir, topic, store), store)
    assert result.error is None and result.copied_bases == bases and len(bases) >= 4
    assert store.most_in_flight == 2
    assert finished_segments_complete(store, log_dir)[(topic, 0)] == bases
    assert read_offsets(store, topic, 0) == list(range(_active_base(log_dir, topic)))


def _flip_in_batch(segment: Path, which: int) -> int:
    """Flip a byte inside the records of batch ``which`` (covered by its CRC); return the batch's base."""
    data = bytearray(segment.read_bytes())
    position, header = list(iter_batch_headers(io.BytesIO(bytes(data))))[which]
    data[position + HEADER_SIZE + (header.size_in_bytes - HEADER_SIZE) // 2] ^= 0x40
    segment.write_bytes(bytes(data))
    return header.base_offset


def test_with_segments_in_flight_the_first_failure_in_offset_order_is_reported(
    dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    bases = rolled_segments(log_dir, topic, 0)
    # Segment 1 is damaged in its last batch, segment 2 (started beside it) in its first: 2 fails first
    # in time, 1 first in offset order.
    damaged = _flip_in_batch(log_dir / f"{topic}-0" / f"{bases[1]:020d}.log", -1)
    _flip_in_batch(log_dir / f"{topic}-0" / f"{bases[2]:020d}.log", 0)
    store = _file_store(tmp_path / "remote")
    result = copy_partition(_copy_task(log_dir, topic, store, 2), store)
    assert result.error is not None and f"{bases[1]:020d}.log" in result.error, result.error
    assert f"offset={damaged}" in result.error, result.error
    assert result.copied_bases == bases[:1]
    assert finished_segments_complete(store, log_dir)[(topic, 0)] == bases[:1]
    for base in bases[1:]:
        assert _segment_entries(store, base) == [], f"segment {base} must leave nothing behind"


def test_copy_refuses_fewer_than_one_segment_in_flight(tmp_path: Path) -> None:
    proc = run_cli(*copy_args(tmp_path, f"file://{tmp_path / 'remote'}", "--segments-in-flight", "0"))
    assert proc.returncode != 0 and "--segments-in-flight must be >= 1, got 0" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "remote").exists()


class _CountedManifests(RemoteStore):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.manifest_writes = 0

    def put_atomic(self, key: str, data: bytes) -> None:
        self.manifest_writes += key.endswith("segments.manifest.json")
        super().put_atomic(key, data)


def test_the_manifest_is_rewritten_at_most_once_per_interval(
    dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(partition_copy._Publisher, "MANIFEST_INTERVAL", 3600.0)
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    bases = rolled_segments(log_dir, topic, 0)
    store = _CountedManifests(f"file://{tmp_path / 'remote'}")
    result = copy_partition(_copy_task(log_dir, topic, store), store)
    assert result.error is None and result.copied_bases == bases and len(bases) >= 4
    # Once as found (rebuilt from the markers), once after the first segment, once at the end.
    assert store.manifest_writes == 3
    layout = RemoteLayout(store.root)
    tp = list_partitions(store, layout, *list_topics(store, layout)[0])[0]
    stored = PartitionCatalog(store, layout, tp).read_manifest()
    assert stored is not None and [m.base_offset for m in stored.segments] == bases
