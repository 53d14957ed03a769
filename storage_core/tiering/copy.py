"""Copy one segment of a partition to the remote tier (the RLM leader's job, from outside).

Per segment: COPY_STARTED marker -> the .log stored, every byte of it CRC-validated on the way (and fed to
the remote index builder), while the indexes, txn index, producer snapshot and leader epochs go up beside
it -> remote indexes -> every object's stored size checked -> COPY_FINISHED marker. Nothing becomes
COPY_FINISHED unless every object is complete, and a failed attempt removes what it wrote (the orphan
sweep catches what a crash leaves). The manifest and the order across segments are partition_copy's.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from storage_core.errors import CorruptDataError, TierkeeperError
from storage_core.faults import fault_point
from storage_core.formats.batch_stream import BatchStreamValidator
from storage_core.formats.checkpoints import EpochEntry, format_leader_epoch_checkpoint
from storage_core.formats.crc import crc32c
from storage_core.formats.indexes import AbortedTxn, encode_txn_index
from storage_core.formats.remote_index import RemoteIndexBuilder
from storage_core.formats.segment_files import SegmentFileKind
from storage_core.logdir import PartitionDir
from storage_core.remote.catalog import PartitionCatalog
from storage_core.remote.layout import SegmentObject, SegmentState, TopicPartitionId
from storage_core.remote.metadata import SegmentMetadata, StoredObject
from storage_core.tiering.plan import SegmentSpan

Progress = Callable[[int], None]


class TransactionsNeedLsoError(TierkeeperError):
    """Transactional data without a last stable offset from the broker: copying could tier an open txn."""


class CopyCancelledError(TierkeeperError):
    """A segment's copy stopped because :meth:`SegmentCopier.cancel` was called (another one failed)."""


@dataclass
class SegmentCopy:
    """Result of one segment copy."""

    metadata: SegmentMetadata
    bytes_copied: int


@dataclass
class _Upload:
    objects: dict[SegmentObject, StoredObject] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)


@dataclass
class StoredSegment:
    """A segment whose ``.log`` is stored and checked, between :meth:`SegmentCopier.start` and
    :meth:`SegmentCopier.finish` (or :meth:`SegmentCopier.abandon`). Its companions may still be uploading."""

    started: SegmentMetadata
    upload: _Upload
    side: _Uploads
    finished: SegmentMetadata
    """What the COPY_FINISHED marker will say, once every object is stored and checked."""
    remote_indexes: list[tuple[SegmentObject, bytes]]


def _now_ms() -> int:
    return int(time.time() * 1000)


def epochs_for(entries: list[EpochEntry], next_offset: int) -> list[EpochEntry]:
    """Leader-epoch entries a follower needs for data below ``next_offset``."""
    return [e for e in entries if e.start_offset < next_offset]


def aborted_for(aborted: list[AbortedTxn], base: int, next_offset: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping [base, next_offset): a reader of this segment must skip them even
    when their ABORT marker lies in a later segment."""
    return sorted(
        (t for t in aborted if t.first_offset < next_offset and t.last_offset >= base),
        key=lambda t: (t.first_offset, t.producer_id),
    )


class SegmentCopier:
    """Copies segments of one partition dir into one remote partition.

    A copy has two halves so that a caller can overlap them across segments: :meth:`start` writes
    COPY_STARTED and stores the ``.log`` (the long part), :meth:`finish` stores the remote indexes, waits
    for and checks every object, and writes COPY_FINISHED. Either half removes what the attempt wrote when
    it fails; a started segment that is not to be finished goes to :meth:`abandon`. Several segments may
    be started at once from different threads; :meth:`cancel` makes those under way stop early.
    """

    def __init__(
        self,
        catalog: PartitionCatalog,
        pdir: PartitionDir,
        *,
        lso_known: bool,
        leader_epochs: list[EpochEntry],
        aborted: list[AbortedTxn],
        broker_id: int | None,
        index_entry_bytes: int,
        progress: Progress | None = None,
    ) -> None:
        self.catalog = catalog
        self.pdir = pdir
        self.tp: TopicPartitionId = catalog.tp
        self.lso_known = lso_known
        self.leader_epochs = leader_epochs
        self.aborted = aborted
        self.broker_id = broker_id
        self.index_entry_bytes = index_entry_bytes
        self.progress = progress or (lambda _n: None)
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Stop every start under way at its next chunk, and refuse new ones (they raise
        :class:`CopyCancelledError` after removing what they wrote)."""
        self._cancelled.set()

    def _check_cancelled(self, meta: SegmentSpan | SegmentMetadata) -> None:
        if self._cancelled.is_set():
            raise CopyCancelledError(f"{self.tp}: copy of segment {meta.base_offset} cancelled")

    def start(self, span: SegmentSpan) -> StoredSegment:
        self._check_cancelled(span)
        segment_id = uuid.uuid4()
        log_path = self.pdir.path / _file(span.base_offset, SegmentFileKind.LOG)
        # Open before anything else: an open file stays readable even if the broker's retention
        # deletes it while we upload.
        try:
            log_file = open(log_path, "rb")
        except FileNotFoundError as exc:
            raise TierkeeperError(
                f"{self.tp}: segment {log_path.name} vanished before it was copied"
            ) from exc
        with log_file:
            size = Path(log_path).stat().st_size
            started = SegmentMetadata(
                topic=self.tp.topic,
                topic_id=self.tp.topic_id,
                partition=self.tp.partition,
                segment_id=segment_id,
                base_offset=span.base_offset,
                end_offset=span.next_offset - 1,
                next_offset=span.next_offset,
                size_bytes=size,
                broker_id=self.broker_id,
                state=SegmentState.COPY_STARTED,
                event_time_ms=_now_ms(),
            )
            self.catalog.write_marker(started)
            fault_point("copy.segment.started")
            upload = _Upload()
            # On an object store the small objects go up on helper threads while the .log is copied: each
            # costs a few requests whose latency would otherwise add up after every segment (on a local
            # filesystem they are written inline, from the first inspection). None of them counts until the
            # COPY_FINISHED marker, which is written only after all have been stored and checked.
            side = _Uploads(
                self._putter(started, upload),
                self._key_of(started),
                upload.keys,
                self.catalog.store.write_concurrency,
            )
            try:
                stored = self._store_log(started, log_file, size, upload, side)
                fault_point("copy.log.stored")
                return stored
            except BaseException:
                side.close(failed=True)
                self._discard(started, upload)
                raise

    def finish(self, stored: StoredSegment) -> SegmentCopy:
        try:
            for obj, data in stored.remote_indexes:
                stored.side.put(obj, data)
            stored.side.close(failed=False)
        except BaseException:
            stored.side.close(failed=True)
            self._discard(stored.started, stored.upload)
            raise
        upload = stored.upload
        finished = stored.finished.model_copy(
            update={
                "event_time_ms": _now_ms(),
                "objects": {obj: upload.objects[obj] for obj in SegmentObject if obj in upload.objects},
            }
        )
        try:
            self.catalog.write_marker(finished)
        except BaseException:
            self._discard(stored.started, upload)
            raise
        fault_point("copy.segment.finished")
        return SegmentCopy(finished, sum(o.size for o in finished.objects.values()))

    def abandon(self, stored: StoredSegment) -> None:
        """Remove a started segment that will not be finished (e.g. the one before it failed)."""
        stored.side.close(failed=True)
        self._discard(stored.started, stored.upload)

    # ---- the steps ------------------------------------------------------------------------------
    def _object_key(self, meta: SegmentMetadata, obj: SegmentObject) -> str:
        return self.catalog.layout.object_key(self.tp, meta.base_offset, meta.segment_id, obj)

    def _key_of(self, meta: SegmentMetadata) -> Callable[[SegmentObject], str]:
        return lambda obj: self._object_key(meta, obj)

    def _putter(self, meta: SegmentMetadata, upload: _Upload) -> Callable[[SegmentObject, bytes], None]:
        return lambda obj, data: self._put(upload, meta, obj, data)

    def _store_log(
        self, meta: SegmentMetadata, log_file: BinaryIO, size: int, upload: _Upload, side: _Uploads
    ) -> StoredSegment:
        tp = self.tp
        log_key = self._object_key(meta, SegmentObject.LOG)
        validator = BatchStreamValidator(
            path=str(self.pdir.path / _file(meta.base_offset, SegmentFileKind.LOG))
        )
        builder = RemoteIndexBuilder(target_entry_bytes=self.index_entry_bytes)
        object_name = log_key.rsplit("/", 1)[-1]

        def inspect(chunk: memoryview) -> None:
            self._check_cancelled(meta)
            side.run_deferred()
            for position, header in validator.feed(chunk):
                builder.add_batch(object_name, position, header)
            self.progress(len(chunk))

        epochs = epochs_for(self.leader_epochs, meta.next_offset)
        for obj, data in self._companions(meta, epochs):
            side.put(obj, data)
        upload.keys.append(log_key)
        try:
            written = self.catalog.store.put_from_file(log_key, log_file, size, inspect)
            summary = validator.finish()
        except CorruptDataError as exc:
            raise _located(exc, tp, meta.base_offset) from exc
        # The batch chain instead of a whole-object CRC: the batch CRCs checked above already cover all
        # but 21 bytes per batch, and a second pass over the data cost ~5% of a local copy's speed.
        upload.objects[SegmentObject.LOG] = StoredObject(
            size=written, batch_chain_crc32c=summary.chain_crc32c
        )
        self._verify_size(meta, SegmentObject.LOG, written)
        if summary.has_transactional and not self.lso_known:
            raise TransactionsNeedLsoError(
                f"{tp}: segment {meta.base_offset} holds transactional batches; the last stable offset "
                "is needed to copy it safely (pass --bootstrap-servers)"
            )
        if summary.last_offset is not None and summary.last_offset >= meta.next_offset:
            raise CorruptDataError(
                f"segment holds offset {summary.last_offset}, beyond its successor's base",
                topic=tp.topic,
                partition=tp.partition,
                offset=meta.base_offset,
            )
        files = builder.finish()
        first_ts = builder.entries[0][1].first_timestamp if builder.entries else -1
        finished = meta.with_state(
            SegmentState.COPY_FINISHED,
            _now_ms(),
            end_offset=summary.last_offset if summary.last_offset is not None else meta.base_offset - 1,
            max_timestamp=summary.max_timestamp if summary.max_timestamp is not None else -1,
            first_timestamp=first_ts,
            record_count=summary.records,
            has_transactions=summary.has_transactional,
            leader_epochs=[(e.epoch, e.start_offset) for e in epochs],
        )
        remote_indexes = [
            (SegmentObject.REMOTE_LOG_INDEX, files.log_index),
            (SegmentObject.REMOTE_OFFSET_INDEX, files.offset_index),
            (SegmentObject.REMOTE_TIME_INDEX, files.time_index),
        ]
        return StoredSegment(meta, upload, side, finished, remote_indexes)

    def _companions(
        self, meta: SegmentMetadata, epochs: list[EpochEntry]
    ) -> Iterator[tuple[SegmentObject, bytes]]:
        """The objects shipped beside the .log that do not depend on its contents."""
        for kind, obj in (
            (SegmentFileKind.INDEX, SegmentObject.OFFSET_INDEX),
            (SegmentFileKind.TIME_INDEX, SegmentObject.TIME_INDEX),
        ):
            path = self.pdir.path / _file(meta.base_offset, kind)
            yield obj, path.read_bytes() if path.exists() else b""
        aborted = aborted_for(self.aborted, meta.base_offset, meta.next_offset)
        if aborted:
            yield SegmentObject.TXN_INDEX, encode_txn_index(aborted)
        snapshot = self.pdir.producer_snapshot(meta.next_offset)
        if snapshot is not None:
            yield SegmentObject.PRODUCER_SNAPSHOT, snapshot.read_bytes()
        yield SegmentObject.LEADER_EPOCHS, format_leader_epoch_checkpoint(epochs).encode()

    def _put(self, upload: _Upload, meta: SegmentMetadata, obj: SegmentObject, data: bytes) -> None:
        self.catalog.store.put_chunks(self._object_key(meta, obj), [data] if data else [])
        self._verify_size(meta, obj, len(data))
        upload.objects[obj] = StoredObject(size=len(data), crc32c=crc32c(data))

    def _verify_size(self, meta: SegmentMetadata, obj: SegmentObject, expected: int) -> None:
        """Read the stored size back: a store that accepted fewer bytes than sent must fail the copy."""
        actual = self.catalog.store.size(self._object_key(meta, obj))
        if actual != expected:
            raise TierkeeperError(
                f"{self.tp}: remote {obj.value} of segment {meta.base_offset} has "
                f"{actual} bytes, expected {expected}"
            )

    def _discard(self, meta: SegmentMetadata, upload: _Upload) -> None:
        """Best effort: remove a failed attempt now; the orphan sweep removes whatever this misses."""
        try:
            marker = self.catalog.layout.marker_key(
                self.tp, meta.base_offset, meta.segment_id, SegmentState.COPY_STARTED
            )
            self.catalog.store.delete([*upload.keys, marker])
        except Exception:  # noqa: BLE001 - the original error matters more than the cleanup's
            pass


class _Uploads:
    """Small objects of one segment, stored on up to ``workers`` helper threads; ``close`` waits for all.

    With one worker there are no helper threads: writes wait until ``run_deferred`` (which the .log's
    inspection calls once the copy is under way, so they fill the checking thread's wait for the first
    copied range) or ``close``. ``put(obj, data)`` stores one object; ``key_of(obj)`` names it. Each key is
    recorded in ``keys`` before its write can start, so a failed attempt's cleanup finds every object that
    may exist. ``close`` never returns while a write is still running (cleanup cannot race a late write);
    after a failure elsewhere (``failed``) it drops the writes not yet started, and otherwise it re-raises
    the first failed write.
    """

    def __init__(
        self,
        put: Callable[[SegmentObject, bytes], None],
        key_of: Callable[[SegmentObject], str],
        keys: list[str],
        workers: int,
    ) -> None:
        self._put, self._key_of, self._keys = put, key_of, keys
        self._pool = (
            ThreadPoolExecutor(workers, thread_name_prefix="tierkeeper-companion") if workers > 1 else None
        )
        self._pending: list[Future[None]] = []
        self._deferred: list[tuple[SegmentObject, bytes]] = []

    def put(self, obj: SegmentObject, data: bytes) -> None:
        self._keys.append(self._key_of(obj))
        if self._pool is None:
            self._deferred.append((obj, data))
        else:
            self._pending.append(self._pool.submit(self._put, obj, data))

    def run_deferred(self) -> None:
        while self._deferred:
            self._put(*self._deferred.pop(0))

    def close(self, *, failed: bool) -> None:
        if self._pool is None:
            if failed:
                self._deferred.clear()
            else:
                self.run_deferred()
            return
        self._pool.shutdown(wait=True, cancel_futures=failed)
        if not failed:
            for future in self._pending:
                future.result()


def _file(base_offset: int, kind: SegmentFileKind) -> str:
    return f"{base_offset:020d}{kind.value}"


def _located(exc: CorruptDataError, tp: TopicPartitionId, segment_base: int) -> CorruptDataError:
    return CorruptDataError(
        f"corrupted segment {segment_base:020d}.log: {exc}",
        topic=tp.topic,
        partition=tp.partition,
        offset=exc.offset if exc.offset is not None else segment_base,
    )
