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

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from storage_core.remote.reader import ReadOptions, RemoteReader
from storage_core.remote.scan_plan import PartitionWindow, ScanSplit, plan_partition, read_split
from storage_core.spark.options import ScanOptions, parse_options
from storage_core.spark.windows import Pruning, partition_window, plan_batch, topic_partitions

SHORT_NAME = "tierkeeper"
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
    "timestampType int"
)
HEADERS_COLUMN = ", headers array<struct<key: string, value: binary>>"


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
        return int(value.timestamp() * 1000)
    return None


def pruning_from_filters(filters: Sequence[Any]) -> Pruning:
    """What the AND of pushed filters allows leaving out (filters it cannot use prune nothing)."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

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
        column = f.attribute[0] if len(f.attribute) == 1 else None
        value = getattr(f, "value", None)
        if column == "partition":
            wanted: set[int] | None = None
            if isinstance(f, EqualTo) and isinstance(value, int):
                wanted = {value}
            elif (
                isinstance(f, In)
                and isinstance(value, tuple | list)
                and all(isinstance(v, int) for v in value)
            ):
                wanted = set(value)
            if wanted is not None:
                partitions = wanted if partitions is None else partitions & wanted
        elif column == "offset" and isinstance(value, int) and not isinstance(value, bool):
            if isinstance(f, EqualTo):
                tighten_lo(value)
                tighten_hi(value + 1)
            elif isinstance(f, GreaterThan):
                tighten_lo(value + 1)
            elif isinstance(f, GreaterThanOrEqual):
                tighten_lo(value)
            elif isinstance(f, LessThan):
                tighten_hi(value)
            elif isinstance(f, LessThanOrEqual):
                tighten_hi(value + 1)
        elif column == "timestamp":
            ms = _millis(value)
            if ms is not None and isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo):
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
    a restart read every record exactly once."""

    def __init__(self, opts: ScanOptions) -> None:
        self.opts = opts

    def _bounds(self) -> dict[str, tuple[int, int]]:
        with _open_reader(self.opts) as reader:
            out = {}
            for tp in topic_partitions(reader, self.opts):
                manifest = reader.manifest(tp, refresh=True)
                window = partition_window(reader, self.opts, tp, manifest, Pruning())
                if manifest.start_offset is not None and manifest.end_offset is not None:
                    start = window.start if window is not None else manifest.end_offset + 1
                    out[str(tp.partition)] = (start, manifest.end_offset + 1)
            return out

    def initialOffset(self) -> dict[str, int]:
        return {p: start for p, (start, _) in self._bounds().items()}

    def latestOffset(self) -> dict[str, int]:
        return {p: end for p, (_, end) in self._bounds().items()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        with _open_reader(self.opts) as reader:
            for tp in topic_partitions(reader, self.opts):
                p = str(tp.partition)
                if p not in end:
                    continue
                manifest = reader.manifest(tp, refresh=True)
                # A partition first seen after the query started is read from its first tiered offset.
                first = start.get(p, manifest.start_offset if manifest.start_offset is not None else end[p])
                if first >= end[p]:
                    continue
                window = PartitionWindow(tp, first, end[p])
                splits = plan_partition(reader, manifest, window, max_split_bytes=self.opts.max_split_bytes)
                out.extend(SplitPartition(s) for s in splits)
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitPartition)
        return _read(self.opts, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to acknowledge: the remote tier is read, never consumed."""


class TierkeeperDataSource(DataSource):  # type: ignore[misc]
    """The remote tier of one topic as a DataFrame (batch and streaming), without filter pushdown."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        headers = parse_options(self.options).include_headers
        return SCHEMA + (HEADERS_COLUMN if headers else "")

    def reader(self, schema: Any) -> DataSourceReader:
        return _BatchReader(parse_options(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _StreamReader(parse_options(self.options, streaming=True))


class TierkeeperPushdownDataSource(TierkeeperDataSource):
    """:class:`TierkeeperDataSource` plus ``pushFilters`` (needs spark.sql.python.filterPushdown.enabled)."""

    def reader(self, schema: Any) -> DataSourceReader:
        return _PushdownBatchReader(parse_options(self.options))
