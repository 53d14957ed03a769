"""Reading a partition's history from the remote tier the way a broker answers a fetch: whole stored batches,
as they are, from the one holding the fetch offset, within a byte limit.

Which segment serves which offset is the cover rule (storage_core/remote/cover.py), the same one every
other reader uses, so no offset is served twice across overlapping segments. Each batch's CRC is checked
before it is served: a damaged object becomes an error for that partition, never bytes a client trusts.
Control batches and aborted transactions' batches are served too, as a broker serves them, with the
aborted transactions listed for read_committed clients, who filter exactly as they do on a broker's data.

Thread-safe: many fetches read at once from the gateway's thread pool. ``nowait`` reads (the event loop's)
never touch the store: they answer from what memory holds or raise :class:`NotReady`
(storage_core/gateway/ranges.py).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from storage_core.errors import CorruptDataError, RemoteObjectNotFound
from storage_core.formats.indexes import iter_txn_index
from storage_core.formats.record_batch import HEADER_SIZE, BatchHeader, RawBatch, validate_crc
from storage_core.formats.records import iter_records
from storage_core.formats.remote_index import (
    RemotePointerIndex,
    position_for_offset,
    position_for_timestamp,
    read_remote_log_entry,
)
from storage_core.formats.source import bytes_fetcher
from storage_core.gateway.ranges import Buffer, NotReady, RangeSource
from storage_core.remote.catalog import PartitionCatalog, list_topics
from storage_core.remote.cover import Cover, ServedRange, check_on_boundary
from storage_core.remote.index_cache import IndexCache
from storage_core.remote.layout import RemoteLayout, SegmentObject, SegmentState, TopicPartitionId
from storage_core.remote.metadata import Manifest, SegmentMetadata
from storage_core.remote.store_api import ObjectStore

Clock = Callable[[], float]
RESUME_POSITIONS = 4096
"""Where reads ended, remembered for the next read of each (a few per partition being read)."""


@dataclass(frozen=True, slots=True)
class TierSlice:
    """What the tier answers for one partition of a fetch."""

    records: Buffer
    """Whole record batches as stored (empty when the byte limit left no room for one)."""
    log_start_offset: int
    """The first offset the tier holds: the partition's log start as a client sees it through the gateway."""
    aborted: tuple[tuple[int, int], ...]
    """(producer id, first offset) of every aborted transaction overlapping the served batches."""
    upper_offset: int
    """One past the last offset served (Kafka's upper bound for collecting aborted transactions)."""


@dataclass(frozen=True, slots=True)
class TimestampHit:
    offset: int
    timestamp: int
    leader_epoch: int


@dataclass
class _Cached:
    manifest: Manifest
    cover: Cover
    at: float


class TierHistory:
    """The remote tier as a broker's history: fetches, earliest / latest-tiered offsets, timestamps."""

    def __init__(
        self,
        store: ObjectStore,
        ranges: RangeSource,
        *,
        metadata_ttl_s: float = 10.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self.store = store
        self.layout = RemoteLayout(store.root)
        self.ranges = ranges
        self._indexes = IndexCache(store, self.layout, None)
        self._index_lock = threading.Lock()
        self._ttl = metadata_ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._topics: tuple[float, dict[str, str]] | None = None
        """(when listed, topic id -> topic name)."""
        self._manifests: dict[TopicPartitionId, _Cached] = {}
        self._resume: OrderedDict[tuple[str, int], int] = OrderedDict()
        """(segment object, offset) -> the byte position of the first batch holding it or later: where the
        last read of that object ended. A consumer reading history asks next for exactly that offset, and
        the position is then known without parsing the segment's indexes again."""

    # ---- which topic incarnation ----------------------------------------------------------------
    def topic_name(self, topic_id: str) -> str | None:
        """The name of the tiered topic incarnation ``topic_id`` (Kafka's 22-character form), if tiered."""
        name = self._listed().get(topic_id)
        if name is None:
            # Tiered since the last listing? Looked up again on every miss: only a fetch the broker answered
            # OFFSET_OUT_OF_RANGE asks, and a wrong "not tiered" would reset the client's position.
            name = self._listed(refresh=True).get(topic_id)
        return name

    def known_topic_name(self, topic_id: str) -> str | None:
        """The name of ``topic_id`` from a listing still fresh, without touching the store (None: ask
        :meth:`topic_name`, which may list). Lets a caller on an event loop skip a thread hop per fetch."""
        with self._lock:
            current = self._topics
        if current is None or self._clock() - current[0] > self._ttl:
            return None
        return current[1].get(topic_id)

    def _listed(self, *, refresh: bool = False) -> dict[str, str]:
        with self._lock:
            current = self._topics
        if refresh or current is None or self._clock() - current[0] > self._ttl:
            listed = {tid: name for name, tid in list_topics(self.store, self.layout)}
            current = (self._clock(), listed)
            with self._lock:
                self._topics = current
        return current[1]

    # ---- metadata -------------------------------------------------------------------------------
    def cover(
        self,
        tp: TopicPartitionId,
        *,
        at_least: int | None = None,
        refresh: bool = False,
        nowait: bool = False,
    ) -> Cover:
        """The partition's cover, from a manifest at most ``metadata_ttl_s`` old, read again whenever it ends
        below ``at_least`` (a copy may have finished since: answering "not tiered" for an offset the tier
        holds would reset the client's position, so a miss is never answered from the cache)."""
        with self._lock:
            cached = self._manifests.get(tp)
        now = self._clock()
        stale = cached is None or now - cached.at > self._ttl or refresh
        if not stale and at_least is not None and cached is not None:
            end = cached.cover.end_offset
            stale = end is None or end < at_least
        if stale or cached is None:
            if nowait:
                raise NotReady(str(tp))
            catalog = PartitionCatalog(self.store, self.layout, tp)
            manifest = catalog.read_manifest() if not refresh else None
            if manifest is None or (at_least is not None and (manifest.end_offset or -1) < at_least):
                manifest = catalog.rebuild_manifest(write=False)
            cached = _Cached(manifest, manifest.cover(), now)
            with self._lock:
                self._manifests[tp] = cached
        return cached.cover

    def earliest(self, tp: TopicPartitionId) -> int | None:
        return self.cover(tp).start_offset

    def latest_tiered(self, tp: TopicPartitionId) -> int | None:
        return self.cover(tp, refresh=True).end_offset

    def epoch_at(self, tp: TopicPartitionId, offset: int) -> int:
        """The leader epoch of ``offset`` as the serving segment recorded it (-1 when it did not)."""
        cover = self.cover(tp)
        index = cover.index_for_offset(offset)
        if index is None:
            return -1
        entries = [
            (start, epoch) for epoch, start in cover.ranges[index].segment.leader_epochs if start <= offset
        ]
        return max(entries)[1] if entries else -1

    # ---- fetch ----------------------------------------------------------------------------------
    def read(
        self,
        tp: TopicPartitionId,
        offset: int,
        max_bytes: int,
        *,
        min_one: bool,
        read_committed: bool,
        nowait: bool = False,
    ) -> TierSlice | None:
        """Batches from the one holding ``offset``, at most ``max_bytes`` of them (at least one whole batch
        when ``min_one``), or None when the tier does not hold ``offset``. ``nowait``: from memory only,
        else :class:`NotReady` (so is every answer that needs the store: a miss, a refresh)."""
        try:
            return self._read(tp, offset, max_bytes, min_one, read_committed, refresh=False, nowait=nowait)
        except RemoteObjectNotFound:
            if nowait:
                raise NotReady(str(tp)) from None
            # Remote retention deleted a segment the cached manifest still listed: look again, once.
            return self._read(tp, offset, max_bytes, min_one, read_committed, refresh=True, nowait=False)

    def _read(
        self,
        tp: TopicPartitionId,
        offset: int,
        max_bytes: int,
        min_one: bool,
        committed: bool,
        *,
        refresh: bool,
        nowait: bool,
    ) -> TierSlice | None:
        cover = self.cover(tp, at_least=offset, refresh=refresh, nowait=nowait)
        if (
            cover.start_offset is None
            or cover.end_offset is None
            or not (cover.start_offset <= offset <= cover.end_offset)
        ):
            if nowait:
                raise NotReady(str(tp))  # "not held" is said only after looking at the store
            self._refuse_quarantined(tp, offset)
            return None
        index = cover.index_for_offset(offset)
        assert index is not None
        served = cover.ranges[index]
        if served.first_offset > offset:
            # A hole inside the tier (a quarantined segment, say): serving the batches after it would make
            # the client skip the missing offsets without a word. The caller answers a retriable error.
            raise CorruptDataError(
                f"offsets {offset}..{served.first_offset - 1} of {tp} are not in the remote tier "
                "(a quarantined or missing segment); refusing to skip them"
            )
        divergence = cover.divergence_in(offset, served.last_offset)
        if divergence is not None:
            raise divergence.refusal(str(tp), tp.topic, tp.partition)
        records, upper, producers = self._batches(
            served, max(offset, served.first_offset), max_bytes, min_one, nowait
        )
        aborted = (
            self._aborted(served.segment, offset, upper, producers, nowait) if committed and producers else ()
        )
        return TierSlice(records, cover.start_offset, aborted, upper)

    def _refuse_quarantined(self, tp: TopicPartitionId, offset: int) -> None:
        """A quarantined segment holding ``offset`` is damaged history, not history that was never there:
        answering "not tiered" would let the client reset its position past it."""
        catalog = PartitionCatalog(self.store, self.layout, tp)
        for entry in catalog.listing().segments.values():
            if entry.state is SegmentState.QUARANTINED and entry.base_offset <= offset:
                meta = catalog.read_marker(entry.base_offset, entry.segment_id, SegmentState.QUARANTINED)
                if meta.end_offset >= offset:
                    raise CorruptDataError(
                        f"offset {offset} of {tp} is in segment {meta.segment_id}, quarantined by scrub "
                        f"({meta.problem or 'damaged'}); refusing to skip it"
                    )

    def _batches(
        self, served: ServedRange, offset: int, max_bytes: int, min_one: bool, nowait: bool
    ) -> tuple[Buffer, int, set[int]]:
        """(the batches, one past their last offset, producer ids of their transactional batches)."""
        meta = served.segment
        key = self.layout.object_key(meta.tp, meta.base_offset, meta.segment_id, SegmentObject.LOG)
        size = meta.objects[SegmentObject.LOG].size
        with self._index_lock:
            resume = self._resume.get((key, offset))
        position = self._position(meta, offset, None, nowait) if resume is None else resume
        # One read for the whole answer as a rule (the index's position, then up to the byte limit and the
        # next header): the batches served are contiguous in the object, so they go out as one slice of it.
        window = _Window(self.ranges, key, size, nowait, max(max_bytes, 0) + HEADER_SIZE)
        first = end = -1
        upper = offset
        producers: set[int] = set()
        while position < size:
            head = window.get(position, position + HEADER_SIZE)
            if len(head) < HEADER_SIZE:
                raise CorruptDataError(f"the object ends inside a batch header at byte {position}", path=key)
            header = BatchHeader.parse(head, path=key, position=position)
            if header.base_offset > served.last_offset:
                break  # the next range serves the rest
            batch_size = header.size_in_bytes
            if header.last_offset < offset:
                position += batch_size
                continue
            check_on_boundary(served, header.base_offset, header.last_offset, key)
            taken = 0 if first < 0 else end - first
            if taken + batch_size > max_bytes and (taken or not min_one):
                break
            batch = window.get(position, position + batch_size)
            if len(batch) < batch_size:
                raise CorruptDataError(f"the object ends inside the batch at byte {position}", path=key)
            validate_crc(batch, path=key, position=position)
            if first < 0:
                first = position
            end = position + batch_size
            upper = header.last_offset + 1
            if header.is_transactional and not header.is_control:
                producers.add(header.producer_id)
            position += batch_size
        if first >= 0:
            with self._index_lock:
                self._resume[(key, upper)] = end
                while len(self._resume) > RESUME_POSITIONS:
                    self._resume.popitem(last=False)
        return (window.get(first, end) if first >= 0 else b""), upper, producers

    def _index(self, meta: SegmentMetadata, obj: SegmentObject, nowait: bool) -> bytes:
        with self._index_lock:
            if nowait:
                data = self._indexes.peek(meta, obj)
                if data is None:
                    raise NotReady(str(meta.segment_id))
                return data
            return self._indexes.get(meta, obj)

    def _position(
        self, meta: SegmentMetadata, offset: int | None, timestamp: int | None, nowait: bool = False
    ) -> int:
        log_index = self._index(meta, SegmentObject.REMOTE_LOG_INDEX, nowait)
        which = (
            SegmentObject.REMOTE_TIME_INDEX if timestamp is not None else SegmentObject.REMOTE_OFFSET_INDEX
        )
        pointers = RemotePointerIndex.from_bytes(self._index(meta, which, nowait))
        if timestamp is not None:
            entry_pos = position_for_timestamp(pointers, timestamp)
        else:
            entry_pos = position_for_offset(pointers, offset if offset is not None else meta.base_offset)
        if entry_pos is None:
            return 0
        return read_remote_log_entry(bytes_fetcher(log_index), entry_pos).data_id.position

    def _aborted(
        self, meta: SegmentMetadata, offset: int, upper: int, producers: set[int], nowait: bool
    ) -> tuple[tuple[int, int], ...]:
        """The aborted transactions overlapping the served batches (last offset >= ``offset``, first offset
        < ``upper``) of the producers whose transactional batches were served. The serving segment's txn
        index is enough: unlike a broker's, a tiered one lists every aborted transaction overlapping the
        segment, its ABORT marker in a later segment or not (docs/remote-layout.md), so the walk over later
        segments that Kafka's UnifiedLog.collectAbortedTransactions needs, and the question to the broker
        about transactions ending past the tier, are not."""
        if not meta.has_transactions or SegmentObject.TXN_INDEX not in meta.objects:
            return ()
        data = self._index(meta, SegmentObject.TXN_INDEX, nowait)
        found: dict[tuple[int, int], None] = {}  # ordered, without repeats
        for txn in iter_txn_index(bytes_fetcher(data)):
            if txn.last_offset >= offset and txn.first_offset < upper and txn.producer_id in producers:
                found[(txn.producer_id, txn.first_offset)] = None
        return tuple(found)

    # ---- timestamps -----------------------------------------------------------------------------
    def offset_for_timestamp(self, tp: TopicPartitionId, timestamp: int) -> TimestampHit | None:
        """The first record (offset order) with a timestamp >= ``timestamp``, as ListOffsets finds it."""
        return self._first_at(self.cover(tp, refresh=True), timestamp)

    def _first_at(self, cover: Cover, timestamp: int) -> TimestampHit | None:
        for served in cover.ranges:
            meta = served.segment
            if meta.max_timestamp < timestamp:
                continue
            key = self.layout.object_key(meta.tp, meta.base_offset, meta.segment_id, SegmentObject.LOG)
            size = meta.objects[SegmentObject.LOG].size
            position = self._position(meta, None, timestamp)
            while position < size:
                head = self.ranges.read(key, position, position + HEADER_SIZE, size)
                header = BatchHeader.parse(head, path=key, position=position)
                if header.base_offset > served.last_offset:
                    break
                if (
                    header.last_offset >= served.first_offset
                    and not header.is_control
                    and header.max_timestamp >= timestamp
                ):
                    hit = self._record_at(key, position, header, timestamp, served.first_offset, size)
                    if hit is not None:
                        return hit
                position += header.size_in_bytes
        return None

    def latest_timestamp(self, tp: TopicPartitionId) -> TimestampHit | None:
        """The first record (offset order) carrying the tier's largest timestamp, as ListOffsets
        max-timestamp (KIP-734) finds it in a log. The largest is the segments' ``max_timestamp``; a
        segment whose largest lies below the tier's start (cut by the cover) finds no record there, and
        then the tier answers nothing rather than a smaller timestamp it cannot prove is the largest."""
        cover = self.cover(tp, refresh=True)  # one listing of the tier for both steps
        latest = max((served.segment.max_timestamp for served in cover.ranges), default=-1)
        return self._first_at(cover, latest) if latest >= 0 else None

    def _record_at(
        self, key: str, position: int, header: BatchHeader, timestamp: int, first: int, size: int
    ) -> TimestampHit | None:
        data = bytes(self.ranges.read(key, position, position + header.size_in_bytes, size))
        batch = RawBatch(header=header, data=data, position=position, path=key)
        for record in iter_records(batch, verify_crc=True):
            if record.offset >= first and record.timestamp >= timestamp:
                return TimestampHit(record.offset, record.timestamp, header.partition_leader_epoch)
        return None


class _Window:
    """One object's bytes read in as few reads as possible: a read covers what is asked and up to ``span``
    bytes from there; what a later ask needs beyond it is read and appended (so a slice of served batches
    is always one buffer)."""

    def __init__(self, ranges: RangeSource, key: str, size: int, nowait: bool, span: int) -> None:
        self._ranges, self._key, self._size, self._nowait, self._span = ranges, key, size, nowait, span
        self._start = 0
        self._data: Buffer = b""

    def get(self, start: int, end: int) -> memoryview:
        end = min(end, self._size)
        have_end = self._start + len(self._data)
        if not (self._start <= start and end <= have_end) or not self._data:
            if self._data and self._start <= start <= have_end:
                more = self._ranges.read(
                    self._key, have_end, max(end, start + self._span), self._size, nowait=self._nowait
                )
                self._data = b"".join((self._data, more))  # rare: a batch larger than the limit
            else:
                self._start = start
                self._data = self._ranges.read(
                    self._key, start, max(end, start + self._span), self._size, nowait=self._nowait
                )
        offset = start - self._start
        return memoryview(self._data)[offset : offset + (end - start)]
