"""Reading records back from the remote tier, by offset or by timestamp, in offset order.

Locating: manifest (one GET) -> segment by binary search -> remoteOffsetIndex / remoteTimeIndex ->
remoteLogIndex entry -> the byte position in the segment object. Only byte ranges from there on are
fetched, with read-ahead (see prefetch.py), and only COPY_FINISHED segments are ever read. On a local
filesystem the segment object is mapped instead (formats/mapped.py): there is no fetch latency to hide,
and the CRC checks, shared between two threads (formats/checked_batches.py), are the only pass over the
bytes.

Isolation: read_committed drops batches of aborted transactions (from the segment's txn index, which
lists every aborted transaction overlapping the segment); control records are never returned.
"""

from __future__ import annotations

import bisect
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from storage_core.errors import ConfigError, CorruptDataError, OffsetOutOfRangeError
from storage_core.formats.checked_batches import CrcChecks, iter_checked_batches
from storage_core.formats.indexes import AbortedTxn, iter_txn_index
from storage_core.formats.mapped import MappedFile
from storage_core.formats.record_batch import RawBatch, iter_batches, validate_crc
from storage_core.formats.records import Record, iter_records
from storage_core.formats.remote_index import (
    RemotePointerIndex,
    position_for_offset,
    position_for_timestamp,
    read_remote_log_entry,
)
from storage_core.formats.source import bytes_fetcher
from storage_core.remote.catalog import PartitionCatalog, list_topics
from storage_core.remote.cover import Divergence, ServedRange, check_on_boundary
from storage_core.remote.index_cache import IndexCache
from storage_core.remote.layout import RemoteLayout, SegmentObject, TopicPartitionId
from storage_core.remote.metadata import Manifest, SegmentMetadata
from storage_core.remote.prefetch import DEFAULT_BLOCK, DEFAULT_DEPTH, SequentialPrefetcher
from storage_core.remote.store_api import ObjectStore

if TYPE_CHECKING:
    import pyarrow as pa

KEEP_BEHIND = 32 << 20
"""Mapped bytes of a local object kept resident behind the batch being yielded (the batches of the group
being checked lie ahead of it; views the caller holds further back stay valid either way)."""


class Isolation(str, Enum):
    READ_COMMITTED = "read_committed"
    READ_UNCOMMITTED = "read_uncommitted"


@dataclass(frozen=True)
class ReadOptions:
    isolation: Isolation = Isolation.READ_COMMITTED
    block_bytes: int = DEFAULT_BLOCK
    readahead_blocks: int = DEFAULT_DEPTH
    cache_dir: Path | None = None


class _Aborted:
    """Aborted transactions of one segment, answering "is this batch's data aborted?"."""

    def __init__(self, txns: list[AbortedTxn]) -> None:
        self._by_producer: dict[int, list[AbortedTxn]] = {}
        for t in txns:
            self._by_producer.setdefault(t.producer_id, []).append(t)
        for lst in self._by_producer.values():
            lst.sort(key=lambda t: t.first_offset)

    def contains(self, producer_id: int, offset: int) -> bool:
        txns = self._by_producer.get(producer_id)
        if not txns:
            return False
        i = bisect.bisect_right([t.first_offset for t in txns], offset) - 1
        return i >= 0 and txns[i].last_offset >= offset


def _left_out(batch: RawBatch, key: str, unchecked: bool) -> None:
    """Check a batch the read leaves out, when nobody else will (``CrcChecks.DECODER``): the decision to
    leave it out was made on its header, and a damaged one must not drop data silently."""
    if unchecked:
        validate_crc(batch.data, path=key, position=batch.position)


class RemoteReader:
    """Reads one remote tier. Not thread-safe; create one per consumer thread."""

    def __init__(self, store: ObjectStore, options: ReadOptions | None = None) -> None:
        self.store = store
        self.options = options or ReadOptions()
        self.layout = RemoteLayout(store.root)
        self._cache = IndexCache(store, self.layout, self.options.cache_dir)
        self._pool = ThreadPoolExecutor(
            max_workers=self.options.readahead_blocks + 1, thread_name_prefix="tierkeeper-readahead"
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> RemoteReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- locating -------------------------------------------------------------------------------
    def resolve(
        self, topic: str, partition: int, topic_id: str | None = None, *, choose_with: str = "--topic-id"
    ) -> TopicPartitionId:
        """``choose_with`` names how the caller's user passes a topic id (a CLI flag, an option)."""
        ids = [tid for name, tid in list_topics(self.store, self.layout) if name == topic]
        if topic_id is not None:
            if topic_id not in ids:
                raise ConfigError(
                    f"topic {topic} with id {topic_id} is not in the remote tier {self.store.url}"
                )
            return TopicPartitionId(topic, topic_id, partition)
        if not ids:
            raise ConfigError(f"topic {topic} is not in the remote tier {self.store.url}")
        if len(ids) > 1:
            raise ConfigError(
                f"topic {topic} has several incarnations in the remote tier ({', '.join(ids)}); "
                f"choose one with {choose_with}"
            )
        return TopicPartitionId(topic, ids[0], partition)

    def manifest(self, tp: TopicPartitionId, *, refresh: bool = False) -> Manifest:
        catalog = PartitionCatalog(self.store, self.layout, tp)
        stored = None if refresh else catalog.read_manifest()
        return stored or catalog.rebuild_manifest(write=False, strict=True)

    # ---- reading --------------------------------------------------------------------------------
    def read_from_offset(self, tp: TopicPartitionId, offset: int) -> Iterator[Record]:
        for batch in self.read_batches_from_offset(tp, offset):
            for record in iter_records(batch, verify_crc=False):  # checked as the batch was read
                if record.offset >= offset:
                    yield record

    def read_batches_from_offset(
        self, tp: TopicPartitionId, offset: int, *, checks: CrcChecks = CrcChecks.SHARED
    ) -> Iterator[RawBatch]:
        """The batches holding ``offset`` and everything after it, CRC-checked (unless ``checks`` leaves
        that to the decoder they go to), in offset order.

        What a broker's remote fetch serves: whole batches as stored (the first may start before
        ``offset``), without decoding records. Control batches are left out, and so are aborted
        transactions' batches under read_committed. ``data`` may be a view of a fetched block or of the
        mapped object; it stays valid as long as it is held. Where stored segments overlap, each batch
        comes from the segment the cover rule chooses (storage_core/remote/cover.py), so no offset is
        served twice.

        ``checks``: who checks the CRCs (checked_batches.py). The default shares a local (mapped) object's
        checks with a helper thread, which halves the wall time of a scan that only looks at batches; a
        caller that goes on to read every byte (the Arrow decoder) wants each batch still in this core's
        cache when it reads it (``INLINE``), or better, checks it during that read (``DECODER``).
        """
        manifest = self.manifest(tp)
        if manifest.end_offset is None or offset > manifest.end_offset:
            manifest = self.manifest(tp, refresh=True)  # the stored manifest may lag a finished copy
        cover = manifest.cover()
        if cover.start_offset is None or cover.end_offset is None:
            raise OffsetOutOfRangeError(f"{tp}: nothing is tiered")
        if offset < cover.start_offset or offset > cover.end_offset:
            raise OffsetOutOfRangeError(
                f"{tp}: offset {offset} is outside the remote tier [{cover.start_offset}, {cover.end_offset}]"
            )
        index = cover.index_for_offset(offset)
        assert index is not None
        for served in cover.ranges[index:]:
            first = max(offset, served.first_offset)
            start = self._start_position(served.segment, first, None)
            if start is not None:
                yield from self._segment_batches(served, start, first, cover.divergences, checks=checks)

    def read_from_timestamp(self, tp: TopicPartitionId, timestamp: int) -> Iterator[Record]:
        """From the first record (offset order) with timestamp >= ``timestamp``, as ListOffsets finds it."""
        yield from self.read_from_offset(tp, self._offset_for_timestamp(tp, timestamp))

    def _offset_for_timestamp(self, tp: TopicPartitionId, timestamp: int) -> int:
        """The offset of the first record (offset order) with timestamp >= ``timestamp``."""
        cover = self.manifest(tp, refresh=True).cover()
        index = next((i for i, r in enumerate(cover.ranges) if r.segment.max_timestamp >= timestamp), None)
        for served in cover.ranges[index:] if index is not None else ():
            # Where the time index points below the range's first offset, _segment_batches skips the batches
            # the range before served.
            start = self._start_position(served.segment, None, timestamp)
            if start is None:
                continue
            batches = self._segment_batches(
                served, start, served.first_offset, cover.divergences, min_timestamp=timestamp
            )
            with closing(batches):  # stops the read-ahead as soon as the record is found
                for batch in batches:
                    for record in iter_records(batch, verify_crc=False):  # checked as the batch was read
                        if record.timestamp >= timestamp:
                            return record.offset
        raise OffsetOutOfRangeError(f"{tp}: no tiered record has a timestamp >= {timestamp}")

    def _start_position(self, meta: SegmentMetadata, offset: int | None, timestamp: int | None) -> int | None:
        log_index = self._cache.get(meta, SegmentObject.REMOTE_LOG_INDEX)
        if timestamp is not None:
            pointers = RemotePointerIndex.from_bytes(self._cache.get(meta, SegmentObject.REMOTE_TIME_INDEX))
            entry_pos = position_for_timestamp(pointers, timestamp)
        else:
            pointers = RemotePointerIndex.from_bytes(self._cache.get(meta, SegmentObject.REMOTE_OFFSET_INDEX))
            entry_pos = position_for_offset(pointers, offset if offset is not None else meta.base_offset)
        if entry_pos is None:
            return None
        key = self.layout.object_key(
            meta.tp, meta.base_offset, meta.segment_id, SegmentObject.REMOTE_LOG_INDEX
        )
        entry = read_remote_log_entry(bytes_fetcher(log_index), entry_pos, path=key)
        return entry.locate(key).position

    def index_object(self, meta: SegmentMetadata, obj: SegmentObject) -> bytes:
        """A small object of a finished segment (an index), through the reader's index cache."""
        return self._cache.get(meta, obj)

    def read_segment_batches(
        self,
        served: ServedRange,
        start_position: int = 0,
        end_position: int | None = None,
        *,
        checks: CrcChecks = CrcChecks.SHARED,
    ) -> Iterator[RawBatch]:
        """The batches of one served range (cover.py) stored in ``[start_position, end_position)`` of its
        segment (both batch boundaries, e.g. from the remote log index; the end defaults to the object's
        size), CRC-checked, with control batches, batches the range before serves and, under
        read_committed, aborted transactions' batches left out.

        What a Spark task reading one split of a segment needs: it gets the range from the planner (which
        refuses ranges with divergent copies) and reads no manifest. ``checks`` as in
        :meth:`read_batches_from_offset`."""
        yield from self._segment_batches(
            served, start_position, served.first_offset, end=end_position, checks=checks
        )

    def read_arrow(
        self,
        tp: TopicPartitionId,
        offset: int,
        end_offset: int | None = None,
        *,
        include_headers: bool = False,
        zero_copy: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """Records from ``offset`` up to ``end_offset`` (exclusive; default: the end of the remote tier) as
        Arrow batches with the columns of Spark's Kafka source (formats/arrow_records.py), decoded
        without a Python object per record. ``zero_copy``: key and value as ``binary_view`` columns
        pointing into the mapped object (file://) or the decompressed payloads, not copied."""
        from storage_core.remote.arrow_read import arrow_batches, decoder_checks

        checks = decoder_checks()
        batches = self.read_batches_from_offset(tp, offset, checks=checks)
        yield from arrow_batches(
            batches,
            checks,
            tp.topic,
            tp.partition,
            include_headers=include_headers,
            min_offset=offset,
            end_offset=end_offset,
            zero_copy=zero_copy,
        )

    def _segment_batches(
        self,
        served: ServedRange,
        start: int,
        first: int,
        divergences: Sequence[Divergence] = (),
        *,
        min_timestamp: int | None = None,
        end: int | None = None,
        checks: CrcChecks = CrcChecks.SHARED,
    ) -> Generator[RawBatch, None, None]:
        """The range's batches from byte ``start`` (an index entry's position), leaving out those wholly
        below offset ``first`` and, with ``min_timestamp``, those without a record that recent.
        ``divergences``: offsets whose stored copies disagree; the read stops with DivergentDataError
        before serving a batch holding any of them. ``end``: stop at this byte (a batch boundary) instead of
        the object's end."""
        meta = served.segment
        key = self.layout.object_key(meta.tp, meta.base_offset, meta.segment_id, SegmentObject.LOG)
        committed = self.options.isolation is Isolation.READ_COMMITTED
        aborted = (
            _Aborted(list(iter_txn_index(bytes_fetcher(self._cache.get(meta, SegmentObject.TXN_INDEX)))))
            if committed and meta.has_transactions
            else None
        )
        size = meta.objects[SegmentObject.LOG].size
        unchecked = checks is CrcChecks.DECODER
        for batch in self._checked_batches(key, size if end is None else min(end, size), start, checks):
            header = batch.header
            if header.last_offset < first:
                # Below the read's start, or served by the range before (overlapping segments).
                _left_out(batch, key, unchecked)
                continue
            if min_timestamp is not None and header.max_timestamp < min_timestamp:
                _left_out(batch, key, unchecked)
                continue
            check_on_boundary(served, header.base_offset, header.last_offset, key)
            divergence = next(
                (
                    d
                    for d in divergences
                    if header.base_offset <= d.last_offset and header.last_offset >= d.first_offset
                ),
                None,
            )
            if divergence is not None:
                raise divergence.refusal(str(meta.tp), meta.topic, meta.partition)
            if header.is_control or (
                aborted is not None
                and header.is_transactional
                and aborted.contains(header.producer_id, header.base_offset)
            ):
                _left_out(batch, key, unchecked)
                continue
            yield batch

    def _checked_batches(self, key: str, size: int, start: int, checks: CrcChecks) -> Iterator[RawBatch]:
        """Every batch of the object from ``start`` to its recorded ``size``, CRC-checked as ``checks``
        says; an object that ends early (at a batch boundary, which the framing alone cannot notice) is
        damage too."""
        end = start
        for batch in self._stored_batches(key, size, start, checks):
            end = batch.end_position
            yield batch
        if end < size:
            raise CorruptDataError(f"the object ends at byte {end}, but {size} bytes were tiered", path=key)

    def _stored_batches(self, key: str, size: int, start: int, checks: CrcChecks) -> Iterator[RawBatch]:
        verify = checks is not CrcChecks.DECODER
        local = self.store.open_local(key)
        if local is not None:
            with local:
                mapped = MappedFile(local, size)
            checked = (
                iter_checked_batches(mapped, start, self._pool, path=key, chunk_size=size)
                if checks is CrcChecks.SHARED
                else iter_batches(mapped, start, path=key, chunk_size=size, verify_crc=verify)
            )
            for batch in checked:
                yield batch
                mapped.release_before(batch.position - KEEP_BEHIND)  # bounds the resident set
            return
        prefetch = SequentialPrefetcher(
            lambda a, b: self.store.get_range(key, a, b),
            size,
            self._pool,
            origin=start,
            block=self.options.block_bytes,
            depth=self.options.readahead_blocks,
        )
        try:
            yield from iter_batches(
                prefetch, start, path=key, chunk_size=self.options.block_bytes, verify_crc=verify
            )
        finally:
            prefetch.close()
