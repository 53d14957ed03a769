"""Copy everything eligible of one partition: plan from the log dir and the remote manifest, then copy
oldest first.

Segments overlap: up to the store's ``segments_in_flight`` segments have their ``.log`` stored at once (on
starter threads), and a finisher thread completes them one by one in offset order (remote indexes, size
checks, COPY_FINISHED) and publishes them in the manifest. Segment N is finished only after N-1 finished,
so the finished segments always form a prefix of the plan: when one fails, the segments started after it
are cancelled and removed instead of finished, and the first failure in offset order is the one reported.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from storage_core.errors import ConfigError, TierkeeperError
from storage_core.formats.segment_files import TopicPartition
from storage_core.logdir import LocalSegment, LogDir
from storage_core.remote.catalog import PartitionCatalog
from storage_core.remote.layout import RemoteLayout, TopicPartitionId
from storage_core.remote.metadata import Manifest, SegmentMetadata
from storage_core.remote.store_api import ObjectStore
from storage_core.tiering.copy import Progress, SegmentCopier, SegmentCopy, StoredSegment
from storage_core.tiering.eligibility import NotTierableError, compacted_locally, copy_refusal
from storage_core.tiering.plan import CopyTask, SegmentSpan, plan_copies


@dataclass
class PartitionCopyResult:
    topic: str
    partition: int
    copied_segments: int = 0
    copied_bytes: int = 0
    already_tiered: int = 0
    held_back: int = 0
    remote_end_offset: int | None = None
    error: str | None = None
    copied_bases: list[int] = field(default_factory=list)
    topic_id: str | None = None
    remote_start_offset: int | None = None
    remote_segments: int = 0
    remote_bytes: int = 0
    untiered_segments: int = 0
    """Rolled local segments (never the active one) not in the remote tier after this run: the copy lag."""
    untiered_bytes: int = 0


def copy_partition(
    task: CopyTask, store: ObjectStore, progress: Progress | None = None
) -> PartitionCopyResult:
    """Run ``task``; errors of this partition are returned in the result, never raised, so a bad
    partition does not stop the others."""
    result = PartitionCopyResult(task.topic, task.partition)
    try:
        _copy(task, store, result, progress)
    except TierkeeperError as exc:
        result.error = str(exc)
    return result


def _copy(task: CopyTask, store: ObjectStore, result: PartitionCopyResult, progress: Progress | None) -> None:
    log_dir = LogDir(task.log_dir)
    wanted = TopicPartition(task.topic, task.partition)
    # Before anything touches the remote tier: a refused topic leaves no trace there.
    refusal = (
        copy_refusal(task.topic, task.topic_configs)
        if task.topic_configs is not None
        else compacted_locally(task.topic, wanted in log_dir.checkpoints().cleaner_offsets)
    )
    if refusal is not None:
        raise NotTierableError(refusal)
    pdir = next((p for p in log_dir.partitions({task.topic}) if p.tp == wanted), None)
    if pdir is None:
        raise ConfigError(f"{wanted}: no partition directory in {task.log_dir}")
    tp = TopicPartitionId(task.topic, pdir.topic_id_string(), task.partition)
    result.topic_id = tp.topic_id
    catalog = PartitionCatalog(store, RemoteLayout(store.root), tp)
    manifest = catalog.rebuild_manifest()
    stable = task.last_stable_offset if task.last_stable_offset is not None else task.high_watermark
    if stable is None:
        raise ConfigError(
            f"{wanted}: neither a last stable offset (--bootstrap-servers) nor a checkpointed "
            "high watermark is known, so no segment can be proven safe to copy"
        )
    segments = pdir.segments()
    # After a leader change the local segment holding remote_next usually starts below it: it is copied
    # whole (byte-identical) and the overlap is resolved by every reader (storage_core/remote/cover.py).
    remote_next = manifest.next_offset
    if remote_next is None:
        # A tier remote retention emptied: its offsets expired, so they are never tiered again.
        remote_next = catalog.read_state().retention_expired_offset
    decision = plan_copies([s.base_offset for s in segments], stable, remote_next)
    result.already_tiered, result.held_back = decision.skipped_tiered, decision.held_back
    copier = SegmentCopier(
        catalog,
        pdir,
        lso_known=task.last_stable_offset is not None,
        leader_epochs=pdir.leader_epochs(),
        aborted=pdir.aborted_transactions(),
        broker_id=task.broker_id,
        index_entry_bytes=task.index_entry_bytes,
        progress=progress,
    )
    publisher = _Publisher(catalog, manifest, result)
    in_flight = max(1, task.segments_in_flight or store.segments_in_flight)
    _copy_in_order(copier, iter(decision.eligible), publisher, in_flight)
    publisher.flush()
    _summarize(result, publisher.manifest, segments)


def _summarize(result: PartitionCopyResult, manifest: Manifest, segments: list[LocalSegment]) -> None:
    """What the remote tier holds after the run, and the rolled local segments it does not hold yet."""
    result.remote_start_offset, result.remote_end_offset = manifest.start_offset, manifest.end_offset
    result.remote_segments = len(manifest.segments)
    result.remote_bytes = sum(s.size_bytes for s in manifest.segments)
    tiered_next = manifest.segments[-1].next_offset if manifest.segments else None
    ordered = sorted(segments, key=lambda s: s.base_offset)
    for segment, successor in zip(ordered, ordered[1:]):
        if tiered_next is None or successor.base_offset > tiered_next:
            result.untiered_segments += 1
            result.untiered_bytes += segment.log_size


def _copy_in_order(
    copier: SegmentCopier, spans: Iterator[SegmentSpan], publisher: _Publisher, in_flight: int
) -> None:
    """Start up to ``in_flight`` segments at once; finish each, in order, once the one before finished."""
    with (
        ThreadPoolExecutor(in_flight, thread_name_prefix="tierkeeper-segment") as starters,
        ThreadPoolExecutor(1, thread_name_prefix="tierkeeper-finish") as finisher,
    ):
        started: deque[Future[StoredSegment]] = deque()

        def start_next() -> None:
            span = next(spans, None)
            if span is not None:
                started.append(starters.submit(copier.start, span))

        for _ in range(in_flight):
            start_next()
        finishing: Future[None] | None = None
        try:
            while started:
                stored = started[0].result()  # stays queued until done, so a failure path abandons it
                started.popleft()
                start_next()
                if finishing is not None:
                    try:
                        finishing.result()
                    except BaseException:
                        copier.abandon(stored)
                        raise
                finishing = finisher.submit(_finish, copier, stored, publisher)
            if finishing is not None:
                finishing.result()
        except BaseException as exc:
            copier.cancel()
            _abandon_started(copier, started)
            earlier = finishing.exception() if finishing is not None else None
            publisher.flush(quietly=True)
            if earlier is not None and earlier is not exc:
                # The segment before failed as well: report the first failure in offset order
                # (the later one stays attached as its context).
                raise earlier  # noqa: B904
            raise


def _abandon_started(copier: SegmentCopier, started: deque[Future[StoredSegment]]) -> None:
    """Remove the segments started after a failure: wait for each start (cancelled, it stops at its next
    chunk and removes what it wrote itself) and abandon the ones that had already completed."""
    for future in started:
        if future.cancel():
            continue
        try:
            stored = future.result()
        except BaseException:  # noqa: BLE001 - the failure being reported is the caller's
            continue
        copier.abandon(stored)


def _finish(copier: SegmentCopier, stored: StoredSegment, publisher: _Publisher) -> None:
    publisher.add(copier.finish(stored))


class _Publisher:
    """Lists finished segments in the stored manifest, in order, and counts them in the result.

    The manifest is derived data (every reader and job can rebuild it from the markers), so it is rewritten
    at most every ``MANIFEST_INTERVAL`` seconds, or twenty times as long as the last rewrite took, and once
    at the end: rewriting it after every segment would make a long backlog quadratic in its length.
    """

    MANIFEST_INTERVAL = 1.0

    def __init__(self, catalog: PartitionCatalog, manifest: Manifest, result: PartitionCopyResult) -> None:
        self._catalog, self.manifest, self._result = catalog, manifest, result
        self._finished: list[SegmentMetadata] = manifest.finished()
        self._unwritten = 0
        self._next_write = 0.0

    def add(self, done: SegmentCopy) -> None:
        self._finished.append(done.metadata)
        self._result.copied_segments += 1
        self._result.copied_bytes += done.bytes_copied
        self._result.copied_bases.append(done.metadata.base_offset)
        self._unwritten += 1
        if time.monotonic() >= self._next_write:
            self.flush()

    def flush(self, *, quietly: bool = False) -> None:
        """Write the manifest if segments were added since the last write. ``quietly``: after another
        failure, whose error matters more (the next copy or read rebuilds the manifest anyway)."""
        if not self._unwritten:
            return
        started = time.monotonic()
        self.manifest = Manifest.of(self._catalog.tp, self._finished)
        try:
            self._catalog.store.put_atomic(
                self._catalog.layout.manifest_key(self._catalog.tp), self.manifest.model_dump_json().encode()
            )
        except TierkeeperError:
            if quietly:
                return
            raise
        self._unwritten = 0
        took = time.monotonic() - started
        self._next_write = started + max(self.MANIFEST_INTERVAL, 20 * took)
