"""``spark.read.format("tierkeeper")``: the remote tier as a DataFrame with the Kafka source's schema.

The planner (driver side) reads manifests and, where needed, remote log indexes, and hands Spark one
input partition per split (scan_plan.py: one per segment, large segments cut by byte range). Each task
opens its own store from the picklable :class:`~storage_core.spark.options.StorageSpec`, reads its
byte range and yields Arrow batches (formats/arrow_records.py), so no row passes through Python
objects. Spark creates the SparkSession; nothing here does.

Filter pushdown (Spark >= 4.1, ``spark.sql.python.filterPushdown.enabled=true``) is offered by
:class:`TierkeeperPushdownDataSource`; Spark refuses a reader that implements ``pushFilters`` while the
setting is off, so :class:`TierkeeperDataSource` does not, and :func:`register` picks the one that fits
the session. Pushed filters on ``partition``, ``offset`` and ``timestamp`` prune partitions, segments
and index entries; Spark still evaluates every filter on the rows, so pruning only has to be safe.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from storage_core.errors import DataLossError
from storage_core.remote.layout import TopicPartitionId
from storage_core.remote.metadata import Manifest
from storage_core.remote.reader import ReadOptions, RemoteReader
from storage_core.remote.scan_plan import PartitionWindow, ScanSplit, plan_partition, read_split
from storage_core.spark.admission import Pending, admit
from storage_core.spark.options import ScanOptions, parse_include_headers, parse_options
from storage_core.spark.windows import Pruning, partition_window, plan_batch, topic_partitions

SHORT_NAME = "tierkeeper"
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
    "timestampType int"
)
HEADERS_COLUMN = ", headers array<struct<key: string, value: binary>>"

_log = logging.getLogger(__name__)


class SplitPartition(InputPartition):  # type: ignore[misc]
    """One task: a split plus what the task needs to open the store. Its repr names the split only."""

    def __init__(self, split: ScanSplit) -> None:
        super().__init__(split)
        self.split = split

    def __repr__(self) -> str:
        s = self.split
        return f"SplitPartition({s.topic}-{s.partition} offsets [{s.start_offset}, {s.end_offset}))"


def _open_reader(opts: ScanOptions) -> RemoteReader:
    return RemoteReader(opts.storage.open(), ReadOptions(isolation=opts.isolation))


def _read(opts: ScanOptions, partition: SplitPartition) -> Iterator[pa.RecordBatch]:
    with _open_reader(opts) as reader:
        yield from read_split(reader, partition.split, include_headers=opts.include_headers)


class _BatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: ScanOptions) -> None:
        self.opts = opts
        self.pruning = Pruning()

    def partitions(self) -> Sequence[InputPartition]:
        with _open_reader(self.opts) as reader:
            return [SplitPartition(s) for s in plan_batch(reader, self.opts, self.pruning)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SplitPartition):
            # Nothing to read (partitions() planned no split): Spark still runs one task, without a split.
            return iter(())
        return _read(self.opts, partition)


def _millis(value: Any) -> int | None:
    if isinstance(value, datetime):
        # Spark hands timestamps as naive local-time datetimes (or aware ones): .timestamp() handles both.
        # Rounded down, so a bound in the middle of a millisecond still keeps that millisecond's records.
        return math.floor(value.timestamp() * 1000)
    return None


def _offset_value(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def pruning_from_filters(filters: Sequence[Any]) -> Pruning:
    """What the AND of pushed filters allows leaving out. A filter it cannot use prunes nothing: any other
    column, ``Not`` (Spark hands ``a <> 1`` as ``Not(EqualTo)``), null tests, string matches, values of
    an unexpected type. Nothing here may fail: Spark evaluates every filter on the rows anyway."""
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )

    partitions: set[int] | None = None
    lo: int | None = None
    hi: int | None = None
    ts_lo: int | None = None

    def tighten_lo(v: int) -> None:
        nonlocal lo
        lo = v if lo is None else max(lo, v)

    def tighten_hi(v: int) -> None:
        nonlocal hi
        hi = v if hi is None else min(hi, v)

    for f in filters:
        attribute = getattr(f, "attribute", None)
        column = attribute[0] if isinstance(attribute, tuple) and len(attribute) == 1 else None
        value = getattr(f, "value", None)
        equal = isinstance(f, EqualTo | EqualNullSafe)
        if column == "partition":
            wanted: set[int] | None = None
            if equal and (number := _offset_value(value)) is not None:
                wanted = {number}
            elif (
                isinstance(f, In)
                and isinstance(value, tuple | list)
                and all(_offset_value(v) is not None for v in value)
            ):
                wanted = set(value)
            if wanted is not None:
                partitions = wanted if partitions is None else partitions & wanted
        elif column == "offset" and (offset := _offset_value(value)) is not None:
            if equal:
                tighten_lo(offset)
                tighten_hi(offset + 1)
            elif isinstance(f, GreaterThan):
                tighten_lo(offset + 1)
            elif isinstance(f, GreaterThanOrEqual):
                tighten_lo(offset)
            elif isinstance(f, LessThan):
                tighten_hi(offset)
            elif isinstance(f, LessThanOrEqual):
                tighten_hi(offset + 1)
        elif column == "timestamp":
            ms = _millis(value)
            if ms is not None and (equal or isinstance(f, GreaterThan | GreaterThanOrEqual)):
                # Only a lower bound prunes: a segment's oldest record is not known, its newest is.
                ts_lo = ms if ts_lo is None else max(ts_lo, ms)
    return Pruning(frozenset(partitions) if partitions is not None else None, lo, hi, ts_lo)


class _PushdownBatchReader(_BatchReader):
    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        self.pruning = pruning_from_filters(filters)
        # Every filter goes back to Spark as well: pruning is by whole index entries, not rows.
        yield from filters


class _StreamReader(DataSourceStreamReader):  # type: ignore[misc]
    """Offsets are ``{"<partition>": next offset}``; the latest is each partition's remote end + 1, so a
    newly tiered segment becomes the next micro-batch. Spark checkpoints the offsets, which is what makes
    a restart read every record exactly once.

    As in the Kafka source: the starting options decide the initial offset only; a partition that
    appears later is read from its first tiered offset; every planned range is checked for offsets the
    remote tier no longer holds (``failOnDataLoss``); the latest offset never moves backwards (a
    quarantined last segment must not make Spark commit a lower offset and read it again). Manifests are
    refreshed at most once per ``manifestRefreshIntervalMs``: Spark asks for the latest offset every few
    milliseconds when idle, and each refresh lists every partition of the topic."""

    def __init__(self, opts: ScanOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.opts = opts
        self._clock = clock
        self._manifests: dict[str, tuple[TopicPartitionId, Manifest]] = {}
        self._refreshed_at: float | None = None
        self._high: dict[str, int] = {}
        """Per partition, the highest offset handed to (or received from) Spark: latest never goes below."""
        self._read_to: dict[str, int] = {}
        """Per partition, a batch's start that was above its end (after a restart, the tier's end having
        gone back): every offset below it was read before, so the next batches begin there at least."""

    def _refresh(
        self, reader: RemoteReader, *, force: bool = False
    ) -> dict[str, tuple[TopicPartitionId, Manifest]]:
        now = self._clock()
        due = self._refreshed_at is None or (now - self._refreshed_at) * 1000 >= self.opts.refresh_interval_ms
        if force or due:
            self._manifests = {
                str(tp.partition): (tp, reader.manifest(tp, refresh=True))
                for tp in topic_partitions(reader, self.opts)
            }
            self._refreshed_at = now
        return self._manifests

    def _raise_high(self, offsets: dict[str, int]) -> None:
        for p, offset in offsets.items():
            self._high[p] = max(self._high.get(p, offset), offset)

    def initialOffset(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with _open_reader(self.opts) as reader:
            for p, (tp, manifest) in self._refresh(reader, force=True).items():
                if manifest.start_offset is None or manifest.end_offset is None:
                    continue
                window = partition_window(reader, self.opts, tp, manifest, Pruning())
                out[p] = window.start if window is not None else manifest.end_offset + 1
        self._raise_high(out)
        return out

    def latestOffset(self) -> dict[str, int]:
        limited = self.opts.max_offsets_per_trigger is not None or self.opts.max_bytes_per_trigger is not None
        if limited and not self._high:
            # A new query: Spark asks for the latest offset before the initial one, and the first batch
            # begins at the initial one. (A restart says where its checkpoint is first, through
            # setLatestSeenOffset -> partitions(X, X); without that, a base below the checkpoint only
            # gives one empty batch, see _plan.)
            self.initialOffset()
        with _open_reader(self.opts) as reader:
            manifests = self._refresh(reader)
        ends = {p: m.end_offset + 1 for p, (_, m) in manifests.items() if m.end_offset is not None}
        if limited:
            pending = {
                p: _pending(manifests[p][1], self._high.get(p, manifests[p][1].start_offset or 0), end)
                for p, end in ends.items()
            }
            ends = admit(pending, self.opts.max_offsets_per_trigger, self.opts.max_bytes_per_trigger)
        self._raise_high(ends)
        return dict(self._high)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        self._raise_high(end)
        self._raise_high(start)
        out: list[InputPartition] = []
        with _open_reader(self.opts) as reader:
            manifests = self._manifests
            if any(p not in manifests for p in end):
                manifests = self._refresh(reader, force=True)
            for p, stop in sorted(end.items(), key=lambda item: int(item[0])):
                planned = self._plan(reader, manifests.get(p), p, start.get(p), stop)
                out.extend(SplitPartition(s) for s in planned)
        return out

    def _plan(
        self,
        reader: RemoteReader,
        known: tuple[TopicPartitionId, Manifest] | None,
        p: str,
        begin: int | None,
        stop: int,
    ) -> list[ScanSplit]:
        """The splits of [begin, stop) of partition ``p``; every offset of it the tier does not hold is
        data loss (failOnDataLoss). ``begin`` None: a partition that appeared after the query started."""
        if begin is not None:
            if stop < begin:
                # Only after a restart (latest never goes back in one reader): the tier's end went back
                # below the checkpoint. Spark starts the next batch at ``stop``; [stop, begin) was read.
                self._read_to[p] = max(begin, self._read_to.get(p, begin))
            begin = max(begin, self._read_to.get(p, begin))
        manifest = known[1] if known is not None else None
        first = manifest.start_offset if manifest is not None else None
        last = manifest.end_offset if manifest is not None else None
        if known is None or manifest is None or first is None or last is None:
            if begin is not None and begin < stop:
                self._data_loss(p, begin, stop, "the remote tier holds nothing of the partition now")
            return []
        tp, after_last = known[0], last + 1
        if begin is None:
            # As the Kafka source does with an added partition: read from its start, which should be 0.
            if first > 0:
                self._data_loss(p, 0, first, "a partition added after the query started begins there")
            begin = first
        if begin >= stop:
            return []
        if begin < first:
            self._data_loss(p, begin, first, "deleted by remote retention or quarantined")
            begin = first
        if stop > after_last:
            self._data_loss(
                p, max(begin, after_last), stop, "no longer at the remote tier's end (quarantined?)"
            )
            stop = after_last
        for lo, hi in _holes(manifest, begin, stop):
            self._data_loss(p, lo, hi, "a hole inside the remote tier (a quarantined or missing segment)")
        if begin >= stop:
            return []
        window = PartitionWindow(tp, begin, stop)
        return plan_partition(reader, manifest, window, max_split_bytes=self.opts.max_split_bytes)

    def _data_loss(self, p: str, lo: int, hi: int, why: str) -> None:
        what = f"{self.opts.topic}-{p}: offsets {lo}..{hi - 1} are not in the remote tier ({why})"
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                f"{what}; some data may have been lost. Set failOnDataLoss=false to skip them with a warning"
            )
        _log.warning("%s: skipped (failOnDataLoss=false)", what)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitPartition)
        return _read(self.opts, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to acknowledge: the remote tier is read, never consumed."""
        self._raise_high(end)


def _pending(manifest: Manifest, start: int, end: int) -> Pending:
    """[start, end) of a partition with the stored sizes of the segments serving it."""
    segments = tuple(
        (r.last_offset + 1, r.segment.size_bytes)
        for r in manifest.cover().ranges
        if r.last_offset >= start and r.first_offset < end
    )
    return Pending(start, max(start, end), segments)


def _holes(manifest: Manifest, lo: int, hi: int) -> list[tuple[int, int]]:
    """Offset ranges inside [lo, hi) that no served segment holds. Offsets between a segment's last offset
    and its ``next_offset`` (the next segment's base on the broker) never existed, so they are no hole."""
    out = []
    ranges = manifest.cover().ranges
    for prev, nxt in zip(ranges, ranges[1:], strict=False):
        held_to = max(prev.last_offset + 1, prev.segment.next_offset)
        a, b = max(held_to, lo), min(nxt.first_offset, hi)
        if a < b:
            out.append((a, b))
    return out


class TierkeeperDataSource(DataSource):  # type: ignore[misc]
    """The remote tier of one topic as a DataFrame (batch and streaming), without filter pushdown."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        # The same for batch and streaming reads: no other option is looked at here (Spark calls schema()
        # before it says which kind of read this is; the reader or streamReader parses the options).
        headers = parse_include_headers(self.options)
        return SCHEMA + (HEADERS_COLUMN if headers else "")

    def reader(self, schema: Any) -> DataSourceReader:
        return _BatchReader(parse_options(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _StreamReader(parse_options(self.options, streaming=True))


class TierkeeperPushdownDataSource(TierkeeperDataSource):
    """:class:`TierkeeperDataSource` plus ``pushFilters`` (needs spark.sql.python.filterPushdown.enabled)."""

    def reader(self, schema: Any) -> DataSourceReader:
        return _PushdownBatchReader(parse_options(self.options))
