"""From the scan options (and pushed filters) to one offset window per partition, then to splits.

Offsets mean what they mean in the Kafka source: ``earliest`` / -2 is the first offset the remote tier
holds, ``latest`` / -1 the offset after the last one it holds; an ending offset is exclusive. A
starting offset below the remote tier's start (deleted by remote retention) fails the query unless
``failOnDataLoss=false``; offsets past its end are clamped to it, because those records are not tiered
yet (read them from the broker). By-timestamp starts take the first offset whose record timestamp is
>= the given one, as ListOffsets does; with no such record the partition reads nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.errors import ConfigError, OffsetOutOfRangeError
from storage_core.remote.catalog import list_partitions
from storage_core.remote.layout import TopicPartitionId
from storage_core.remote.metadata import Manifest
from storage_core.remote.reader import RemoteReader
from storage_core.remote.scan_plan import PartitionWindow, ScanSplit, plan_partition
from storage_core.spark.options import EARLIEST, LATEST, OffsetSpec, ScanOptions


@dataclass(frozen=True)
class Pruning:
    """What pushed filters (or nothing) allow leaving out: partitions, an offset range, old records."""

    partitions: frozenset[int] | None = None
    min_offset: int | None = None
    end_offset: int | None = None
    min_timestamp: int | None = None


def topic_partitions(reader: RemoteReader, opts: ScanOptions) -> list[TopicPartitionId]:
    tp0 = reader.resolve(opts.topic, 0, opts.topic_id)
    return list_partitions(reader.store, reader.layout, tp0.topic, tp0.topic_id)


def _offset_for(spec: OffsetSpec, partition: int, default: int) -> int:
    if isinstance(spec, str):
        return EARLIEST if spec == "earliest" else LATEST
    return spec.get(partition, default)


def _resolve(value: int, first: int, after_last: int) -> int:
    if value == EARLIEST:
        return first
    if value == LATEST:
        return after_last
    return value


def _start(reader: RemoteReader, opts: ScanOptions, tp: TopicPartitionId, first: int, after_last: int) -> int:
    timestamp = opts.starting_timestamp
    if timestamp is None and opts.starting_by_timestamp is not None:
        timestamp = opts.starting_by_timestamp.get(tp.partition)
    if timestamp is not None:
        try:
            return next(iter(reader.read_from_timestamp(tp, timestamp))).offset
        except (OffsetOutOfRangeError, StopIteration):
            return after_last
    start = _resolve(_offset_for(opts.starting, tp.partition, EARLIEST), first, after_last)
    if start < first:
        if opts.fail_on_data_loss:
            raise ConfigError(
                f"{tp}: starting offset {start} is below the remote tier's first offset {first} (deleted by "
                "retention); set failOnDataLoss=false to start there instead"
            )
        start = first
    return min(start, after_last)


def partition_window(
    reader: RemoteReader, opts: ScanOptions, tp: TopicPartitionId, manifest: Manifest, pruning: Pruning
) -> PartitionWindow | None:
    """The window to read of one partition, or None when nothing of it can match."""
    if manifest.start_offset is None or manifest.end_offset is None:
        return None
    if pruning.partitions is not None and tp.partition not in pruning.partitions:
        return None
    first, after_last = manifest.start_offset, manifest.end_offset + 1
    start = _start(reader, opts, tp, first, after_last)
    end = min(_resolve(_offset_for(opts.ending, tp.partition, LATEST), first, after_last), after_last)
    if pruning.min_offset is not None:
        start = max(start, pruning.min_offset)
    if pruning.end_offset is not None:
        end = min(end, pruning.end_offset)
    if start >= end:
        return None
    return PartitionWindow(tp, start, end, pruning.min_timestamp)


def plan_batch(reader: RemoteReader, opts: ScanOptions, pruning: Pruning) -> list[ScanSplit]:
    """Every split of a batch scan, partition by partition in offset order."""
    splits: list[ScanSplit] = []
    for tp in topic_partitions(reader, opts):
        if pruning.partitions is not None and tp.partition not in pruning.partitions:
            continue  # not even its manifest is read
        manifest = reader.manifest(tp, refresh=True)
        window = partition_window(reader, opts, tp, manifest, pruning)
        if window is not None:
            splits.extend(plan_partition(reader, manifest, window, max_split_bytes=opts.max_split_bytes))
    return splits


def tiered_end_offsets(reader: RemoteReader, opts: ScanOptions) -> dict[int, int]:
    """One past the last tiered offset of each partition that has tiered data: where reading from the
    brokers takes over (the ``endingOffsets`` of the remote half of a union, the ``startingOffsets`` of
    the Kafka half)."""
    out: dict[int, int] = {}
    for tp in topic_partitions(reader, opts):
        end = reader.manifest(tp, refresh=True).end_offset
        if end is not None:
            out[tp.partition] = end + 1
    return out
