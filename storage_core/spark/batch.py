"""The batch reader of ``spark.read.format("tierkeeper")``: one plan, one task per split.

The planner (driver side) reads manifests and, where needed, remote log indexes (``windows.plan_batch``)
and hands Spark one input partition per split; with ``continueFromKafka`` each partition's range is cut
between the tier and the brokers (``hybrid``). Pushed filters prune the plan (``pushdown``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from storage_core.remote.reader import RemoteReader
from storage_core.remote.scan_plan import PartitionWindow, plan_partition
from storage_core.spark.hybrid import KAFKA, TIER, Brokers, held, pieces, tiered_partitions
from storage_core.spark.hybrid_offsets import (
    hybrid_bounds,
    hybrid_start,
    offsets_at,
    report_lost,
    resolve_spec,
    times_asked,
)
from storage_core.spark.options import LATEST, ScanOptions
from storage_core.spark.pushdown import PruneWithFilters
from storage_core.spark.tasks import KafkaRangePartition, SplitPartition, kafka_tasks, open_reader, read_task
from storage_core.spark.windows import Pruning, plan_batch


class BatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: ScanOptions) -> None:
        self.opts = opts
        self.pruning = Pruning()

    @property
    def pushFilters(self) -> PruneWithFilters:
        return PruneWithFilters(self)

    def partitions(self) -> Sequence[InputPartition]:
        with open_reader(self.opts) as reader:
            if self.opts.kafka is not None:
                return _plan_hybrid_batch(reader, self.opts, self.pruning)
            return [SplitPartition([s]) for s in plan_batch(reader, self.opts, self.pruning)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SplitPartition | KafkaRangePartition):
            # Nothing to read (partitions() planned no split): Spark still runs one task, without a split.
            return iter(())
        return read_task(self.opts, partition)


def _plan_hybrid_batch(reader: RemoteReader, opts: ScanOptions, pruning: Pruning) -> list[InputPartition]:
    """A batch read with continueFromKafka: each partition's [start, end) from the tier where it holds
    it and from the brokers elsewhere (hybrid.py); ``latest`` is the brokers' end."""
    assert opts.kafka is not None
    brokers = Brokers(opts.kafka, opts.isolation)
    on_brokers = brokers.partitions(opts)
    tiered = tiered_partitions(reader, opts, brokers.topic_ids(on_brokers))
    keys = sorted(set(tiered) | on_brokers)
    if pruning.partitions is not None:
        keys = [k for k in keys if k[1] in pruning.partitions]
    lows = brokers.starts([k for k in keys if k in on_brokers])
    highs = brokers.ends([k for k in keys if k in on_brokers])
    starts_at = offsets_at(reader, brokers, tiered, on_brokers, times_asked(opts, keys, start=True))
    ends_at = offsets_at(reader, brokers, tiered, on_brokers, times_asked(opts, keys, start=False))
    out: list[InputPartition] = []
    for key in keys:
        tp = tiered.get(key)
        manifest = reader.manifest(tp, refresh=True) if tp is not None else None
        first, after_last = hybrid_bounds(manifest, lows.get(key), highs.get(key))
        if first is None or after_last is None:
            continue
        start = hybrid_start(opts, key, first, after_last, starts_at)
        if key in ends_at:
            found_end = ends_at[key][1]
            end = after_last if found_end is None else min(found_end, after_last)  # no match: latest
        else:
            end = min(resolve_spec(opts.ending, key, LATEST, first, after_last), after_last)
        if pruning.min_offset is not None:
            start = max(start, pruning.min_offset)
        if pruning.end_offset is not None:
            end = min(end, pruning.end_offset)
        if start >= end:
            continue
        for piece in pieces(start, end, held(manifest), lows.get(key), highs.get(key)):
            if piece.source == TIER:
                assert tp is not None and manifest is not None
                window = PartitionWindow(tp, piece.start, piece.end, pruning.min_timestamp)
                out.extend(
                    SplitPartition([s])
                    for s in plan_partition(reader, manifest, window, max_split_bytes=opts.max_split_bytes)
                )
            elif piece.source == KAFKA:
                out.extend(kafka_tasks(key, piece.start, piece.end, opts.max_records_per_partition))
            else:
                report_lost(opts, key, piece.start, piece.end, "deleted by retention on both sides")
    return out
