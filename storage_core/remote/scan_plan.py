"""Planning a parallel scan of the remote tier: which byte ranges of which segments to read, as small
picklable splits (what the Spark DataSource hands its tasks), and reading one split as Arrow.

A scan asks for, per partition, an offset window ``[start, end)`` and optionally a lower bound on
timestamps. The planner keeps the segments that overlap the window (the manifest, no data read),
then, where a segment is larger than ``max_split_bytes``, only partly inside the window or straddles
the timestamp bound, walks its remoteLogIndex (one small object) to cut it into byte ranges of
whole index entries, leaving out entries outside the window or whose newest record is older than the
bound. Reading a split fetches only its byte range; records outside the window are dropped by the
decoder, so the result is exact for offsets; the timestamp bound only prunes (the caller filters).

Which segment serves which offsets is the cover rule's decision (cover.py), as for every other reader:
one split never reads offsets another segment serves, and a range whose copies diverge is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from storage_core.errors import DivergentDataError
from storage_core.formats.remote_index import iter_remote_log_index
from storage_core.formats.source import bytes_fetcher
from storage_core.remote.cover import ServedRange
from storage_core.remote.layout import SegmentObject, TopicPartitionId
from storage_core.remote.metadata import Manifest, SegmentMetadata
from storage_core.remote.reader import RemoteReader

DEFAULT_SPLIT_BYTES = 128 << 20
"""Stored bytes per split: a 1 GiB segment becomes 8 tasks; small segments stay one task each."""


@dataclass(frozen=True)
class ScanSplit:
    """One task's work: records ``[start_offset, end_offset)`` from bytes ``[start_position,
    end_position)`` of one segment's ``.log`` (``end_position`` None: to the object's end), a segment
    that serves offsets from ``served_first`` on (cover.py).

    Carries the segment's metadata as JSON so a task reads no manifest; nothing secret is in it."""

    topic: str
    topic_id: str
    partition: int
    segment_json: str
    served_first: int
    start_position: int
    end_position: int | None
    start_offset: int
    end_offset: int

    @property
    def tp(self) -> TopicPartitionId:
        return TopicPartitionId(self.topic, self.topic_id, self.partition)

    def served(self) -> ServedRange:
        meta = SegmentMetadata.model_validate_json(self.segment_json)
        return ServedRange(meta, self.served_first, meta.end_offset)


@dataclass(frozen=True)
class PartitionWindow:
    """What a scan wants of one partition: offsets ``[start, end)`` and records at or after a timestamp."""

    tp: TopicPartitionId
    start: int
    end: int
    min_timestamp: int | None = None


def plan_partition(
    reader: RemoteReader,
    manifest: Manifest,
    window: PartitionWindow,
    *,
    max_split_bytes: int = DEFAULT_SPLIT_BYTES,
) -> list[ScanSplit]:
    """The splits that cover ``window`` of one partition, in offset order."""
    splits: list[ScanSplit] = []
    cover = manifest.cover()
    for served in cover.ranges:
        meta = served.segment
        lo, hi = max(served.first_offset, window.start), min(served.last_offset + 1, window.end)
        if lo >= hi:
            continue
        divergence = cover.divergence_in(lo, hi - 1)
        if divergence is not None:
            raise DivergentDataError(
                f"refusing to serve {window.tp}: {divergence.describe()}",
                topic=window.tp.topic,
                partition=window.tp.partition,
                offset=divergence.first_offset,
            )
        if window.min_timestamp is not None and meta.max_timestamp < window.min_timestamp:
            continue
        size = meta.objects[SegmentObject.LOG].size
        partial = lo > meta.base_offset or hi <= meta.end_offset
        straddles = window.min_timestamp is not None and meta.first_timestamp < window.min_timestamp
        if size <= max_split_bytes and not partial and not straddles:
            splits.append(_split(served, 0, None, lo, hi))
            continue
        splits.extend(_entry_splits(reader, served, lo, hi, window.min_timestamp, max_split_bytes))
    return splits


def _split(served: ServedRange, start: int, end: int | None, lo: int, hi: int) -> ScanSplit:
    meta = served.segment
    return ScanSplit(
        meta.topic,
        meta.topic_id,
        meta.partition,
        meta.model_dump_json(),
        served.first_offset,
        start,
        end,
        lo,
        hi,
    )


def _entry_splits(
    reader: RemoteReader,
    served: ServedRange,
    lo: int,
    hi: int,
    min_timestamp: int | None,
    max_split_bytes: int,
) -> list[ScanSplit]:
    """Runs of consecutive remoteLogIndex entries that may hold wanted records, cut at ``max_split_bytes``;
    each split's offset window is narrowed to its entries', so splits of a segment never share offsets."""
    meta = served.segment
    log_index = reader.index_object(meta, SegmentObject.REMOTE_LOG_INDEX)
    key = reader.layout.object_key(meta.tp, meta.base_offset, meta.segment_id, SegmentObject.REMOTE_LOG_INDEX)
    out: list[ScanSplit] = []
    run_start: int | None = None
    run_end = run_first = run_last = 0

    def close() -> None:
        assert run_start is not None
        out.append(_split(served, run_start, run_end, max(lo, run_first), min(hi, run_last + 1)))

    for _, entry in iter_remote_log_index(bytes_fetcher(log_index), path=key):
        wanted = entry.last_offset >= lo and entry.first_offset < hi
        if wanted and min_timestamp is not None:
            wanted = entry.last_timestamp >= min_timestamp
        position = entry.locate(key).position
        contiguous = run_start is not None and position == run_end
        if run_start is not None and (not wanted or not contiguous or run_end - run_start >= max_split_bytes):
            close()
            run_start = None
        if wanted:
            if run_start is None:
                run_start, run_first = position, entry.first_offset
            run_end, run_last = position + entry.data_length, entry.last_offset
    if run_start is not None:
        close()
    return out


def split_bytes(split: ScanSplit) -> int:
    """The stored bytes ``split`` reads."""
    end = split.end_position
    if end is None:
        end = SegmentMetadata.model_validate_json(split.segment_json).objects[SegmentObject.LOG].size
    return end - split.start_position


def pack_splits(splits: list[ScanSplit], max_bytes: int) -> list[list[ScanSplit]]:
    """Consecutive splits of one partition grouped into runs of at most ``max_bytes`` stored bytes (a
    split larger than that alone), order kept. A task reading a run pays the per-task cost of its
    engine once, not once per segment."""
    out: list[list[ScanSplit]] = []
    held = 0
    for split in splits:
        size = split_bytes(split)
        last = out[-1][-1] if out else None
        same = last is not None and (last.topic, last.topic_id, last.partition) == (
            split.topic,
            split.topic_id,
            split.partition,
        )
        if same and held + size <= max_bytes:
            out[-1].append(split)
            held += size
        else:
            out.append([split])
            held = size
    return out


def read_split(reader: RemoteReader, split: ScanSplit, *, include_headers: bool) -> Iterator[pa.RecordBatch]:
    """The records of one split as Arrow batches with the Kafka source's columns."""
    # Imported here, not at the top: the decoder loads numba (over 100 MB and seconds of a loaded machine),
    # which the Spark workers that only plan a scan or report its schema never need.
    from storage_core.remote.arrow_read import SPARK_GROUP_BYTES, arrow_batches, decoder_checks

    checks = decoder_checks()
    batches = reader.read_segment_batches(
        split.served(), split.start_position, split.end_position, checks=checks
    )
    return arrow_batches(
        batches,
        checks,
        split.topic,
        split.partition,
        include_headers=include_headers,
        min_offset=split.start_offset,
        end_offset=split.end_offset,
        group_bytes=SPARK_GROUP_BYTES,
    )
