"""From the scan options (and pushed filters) to one offset window per partition, then to splits.

Offsets mean what they mean in the Kafka source: ``earliest`` / -2 is the first offset the remote tier
holds, ``latest`` / -1 the offset after the last one it holds; an ending offset is exclusive. A
starting offset below the remote tier's start (deleted by remote retention) fails the query unless
``failOnDataLoss=false``; offsets past its end are clamped to it, because those records are not tiered
yet (read them from the broker). By-timestamp bounds take the first offset whose record timestamp is
>= the given one, as ListOffsets does; the precedence is the Kafka source's (a global timestamp, then
per-partition timestamps, which must name every tiered partition, then offsets). With no such record an
end is the remote end, and a start fails the query unless startingOffsetsByTimestampStrategy=latest
(then it is the remote end too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from storage_core.errors import ConfigError, OffsetOutOfRangeError
from storage_core.remote.catalog import list_partitions, list_topics
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
    """Every tiered partition the subscription reads (a pattern is matched against the whole name, as
    Kafka's is); a named topic the tier does not hold fails, a pattern matching nothing reads nothing."""
    if opts.pattern is not None:
        pattern = re.compile(opts.pattern)
        names = sorted(
            {name for name, _ in list_topics(reader.store, reader.layout) if pattern.fullmatch(name)}
        )
    elif opts.assign is not None:
        names = sorted(opts.assign)
    else:
        names = list(opts.topics or (opts.topic,))
    out: list[TopicPartitionId] = []
    for name in names:
        tp0 = reader.resolve(name, 0, opts.topic_id, choose_with="option topicId")
        wanted = opts.assign.get(name) if opts.assign is not None else None
        out.extend(
            tp
            for tp in list_partitions(reader.store, reader.layout, tp0.topic, tp0.topic_id)
            if wanted is None or tp.partition in wanted
        )
    return out


def _offset_for(spec: OffsetSpec, tp: TopicPartitionId, default: int) -> int:
    if isinstance(spec, str):
        return EARLIEST if spec == "earliest" else LATEST
    return spec.get((tp.topic, tp.partition), default)


def _resolve(value: int, first: int, after_last: int) -> int:
    if value == EARLIEST:
        return first
    if value == LATEST:
        return after_last
    return value


def timestamp_for(
    key: tuple[str, int], global_ts: int | None, per_partition: dict[tuple[str, int], int] | None, name: str
) -> int | None:
    """The timestamp a start or end of partition ``key`` is asked at (the option for every partition, or
    the per-partition map, which must then name it), or None when offsets are asked instead."""
    if global_ts is not None:
        return global_ts
    if per_partition is None:
        return None
    if key not in per_partition:
        raise ConfigError(
            f"option {name} must name every partition read; {key[0]} partition {key[1]} is missing"
        )
    return per_partition[key]


def tier_offset_at(reader: RemoteReader, tp: TopicPartitionId, timestamp: int) -> int | None:
    """The first tiered offset whose record timestamp is >= ``timestamp`` (ListOffsets), or None."""
    try:
        return next(iter(reader.read_from_timestamp(tp, timestamp))).offset
    except (OffsetOutOfRangeError, StopIteration):
        return None


def _at_timestamp(
    reader: RemoteReader,
    tp: TopicPartitionId,
    global_ts: int | None,
    per_partition: dict[tuple[str, int], int] | None,
    name: str,
) -> tuple[int | None, int | None]:
    """The timestamp option ``name`` asks ``tp`` to start or end at (None: offsets are asked instead) and
    the first tiered offset at or after it (None: no tiered record is that recent)."""
    timestamp = timestamp_for((tp.topic, tp.partition), global_ts, per_partition, name)
    return timestamp, None if timestamp is None else tier_offset_at(reader, tp, timestamp)


def _start(reader: RemoteReader, opts: ScanOptions, tp: TopicPartitionId, first: int, after_last: int) -> int:
    timestamp, found = _at_timestamp(
        reader, tp, opts.starting_timestamp, opts.starting_by_timestamp, "startingOffsetsByTimestamp"
    )
    if timestamp is not None:
        if found is not None:
            return found
        if opts.no_match_starts_at_latest:
            return after_last
        raise ConfigError(
            f"{tp}: no tiered record has a timestamp >= {timestamp}; set "
            "startingOffsetsByTimestampStrategy=latest to start at the remote tier's end instead"
        )
    start = _resolve(_offset_for(opts.starting, tp, EARLIEST), first, after_last)
    if start < first:
        if opts.fail_on_data_loss:
            raise ConfigError(
                f"{tp}: starting offset {start} is below the remote tier's first offset {first} (deleted by "
                "retention); set failOnDataLoss=false to start there instead"
            )
        start = first
    return min(start, after_last)


def _end(reader: RemoteReader, opts: ScanOptions, tp: TopicPartitionId, first: int, after_last: int) -> int:
    timestamp, found = _at_timestamp(
        reader, tp, opts.ending_timestamp, opts.ending_by_timestamp, "endingOffsetsByTimestamp"
    )
    if timestamp is not None:
        return after_last if found is None else found
    return _resolve(_offset_for(opts.ending, tp, LATEST), first, after_last)


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
    end = min(_end(reader, opts, tp, first, after_last), after_last)
    if pruning.min_offset is not None:
        start = max(start, pruning.min_offset)
    if pruning.end_offset is not None:
        end = min(end, pruning.end_offset)
    if start >= end:
        return None
    return PartitionWindow(tp, start, end, pruning.min_timestamp)


def plan_batch(reader: RemoteReader, opts: ScanOptions, pruning: Pruning) -> list[ScanSplit]:
    """Every split of a batch scan, partition by partition in offset order."""
    windows: list[tuple[Manifest, PartitionWindow]] = []
    for tp in topic_partitions(reader, opts):
        if pruning.partitions is not None and tp.partition not in pruning.partitions:
            continue  # not even its manifest is read
        manifest = reader.manifest(tp, refresh=True)
        window = partition_window(reader, opts, tp, manifest, pruning)
        if window is not None:
            windows.append((manifest, window))
    splits = _plan(reader, windows, opts.max_records_per_partition, opts.max_split_bytes)
    if opts.min_partitions is not None and 0 < len(splits) < opts.min_partitions:
        # minPartitions, as the Kafka source does it: cut the offset ranges into about that many pieces
        # (a piece inside one remote index entry reads that entry's bytes; the decoder trims the rows).
        offsets = sum(w.end - w.start for _, w in windows)
        step = max(1, -(-offsets // opts.min_partitions))
        if opts.max_records_per_partition is not None:
            step = min(step, opts.max_records_per_partition)
        splits = _plan(reader, windows, step, opts.max_split_bytes)
    return splits


def _plan(
    reader: RemoteReader,
    windows: list[tuple[Manifest, PartitionWindow]],
    step: int | None,
    split_bytes: int,
) -> list[ScanSplit]:
    """Splits of every window; with ``step``, each window is first cut into runs of at most that many
    offsets (so at most that many records per split)."""
    out: list[ScanSplit] = []
    for manifest, window in windows:
        pieces = (
            [window]
            if step is None
            else [
                PartitionWindow(window.tp, lo, min(lo + step, window.end), window.min_timestamp)
                for lo in range(window.start, window.end, step)
            ]
        )
        for piece in pieces:
            out.extend(plan_partition(reader, manifest, piece, max_split_bytes=split_bytes))
    return out


def tiered_end_offsets(reader: RemoteReader, opts: ScanOptions) -> dict[TopicPartitionId, int]:
    """One past the last tiered offset of each partition that has tiered data: where reading from the
    brokers takes over (the ``endingOffsets`` of the remote half of a union, the ``startingOffsets`` of
    the Kafka half)."""
    out: dict[TopicPartitionId, int] = {}
    for tp in topic_partitions(reader, opts):
        end = reader.manifest(tp, refresh=True).end_offset
        if end is not None:
            out[tp] = end + 1
    return out
