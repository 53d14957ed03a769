"""The tasks of a ``tierkeeper`` read: what one Spark input partition holds and how a task reads it.

A tier task is consecutive splits of one partition (``remote.scan_plan``) read through a store the task
opens itself from the picklable ``StorageSpec``; a brokers task (``continueFromKafka``) is an offset range
read with a Kafka client (``adapters.kafka_tail``). Both yield Arrow batches with the Kafka source's
schema. Shared by the batch reader (``batch``) and the stream reader (``stream``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from storage_core.adapters.kafka_tail import read_range
from storage_core.remote.reader import Isolation, ReadOptions, RemoteReader
from storage_core.remote.scan_plan import ScanSplit, pack_splits, read_split
from storage_core.spark.options import ScanOptions


class SplitPartition(InputPartition):  # type: ignore[misc]
    """One task: consecutive splits of one partition, read in order, plus what the task needs to open
    the store. Its repr names the splits' offsets only.

    A batch read plans one split per task (its splits spread over the cores). A micro-batch packs a
    partition's splits into as few tasks as ``maxBytesPerSplit`` allows, as the Kafka source reads a
    partition's range of a batch in one task: each task of a Python source costs Spark a launch and a
    Python worker round trip, more than reading a 16 MiB segment (docs/benchmarks.md, issue 31)."""

    def __init__(self, splits: Sequence[ScanSplit]) -> None:
        super().__init__(tuple(splits))
        self.splits = tuple(splits)

    def __repr__(self) -> str:
        first, last = self.splits[0], self.splits[-1]
        many = f" in {len(self.splits)} splits" if len(self.splits) > 1 else ""
        offsets = f"offsets [{first.start_offset}, {last.end_offset})"
        return f"SplitPartition({first.topic}-{first.partition} {offsets}{many})"


def tier_tasks(splits: list[ScanSplit], max_bytes: int) -> list[InputPartition]:
    return [SplitPartition(run) for run in pack_splits(splits, max_bytes)]


class KafkaRangePartition(InputPartition):  # type: ignore[misc]
    """One task of a hybrid read: offsets [start, end) of a partition, read from the brokers."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"KafkaRangePartition({self.topic}-{self.partition} offsets [{self.start}, {self.end}))"


def open_reader(opts: ScanOptions) -> RemoteReader:
    return RemoteReader(opts.storage.open(), ReadOptions(isolation=opts.isolation))


def read_task(opts: ScanOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, KafkaRangePartition):
        assert opts.kafka is not None
        yield from read_range(
            opts.kafka,
            partition.topic,
            partition.partition,
            partition.start,
            partition.end,
            read_committed=opts.isolation is Isolation.READ_COMMITTED,
            include_headers=opts.include_headers,
        )
        return
    assert isinstance(partition, SplitPartition)
    with open_reader(opts) as reader:
        for split in partition.splits:
            yield from read_split(reader, split, include_headers=opts.include_headers)


def kafka_tasks(key: tuple[str, int], start: int, end: int, step: int | None) -> list[InputPartition]:
    step = step or max(1, end - start)
    return [KafkaRangePartition(key[0], key[1], lo, min(lo + step, end)) for lo in range(start, end, step)]
