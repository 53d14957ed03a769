"""Reading a broker's log dir from outside the broker: partitions, segments, checkpoints.

Only live partition directories count: ``-delete``, ``-future`` and ``-stray`` directories and the
``__cluster_metadata`` log are skipped. Nothing here writes to the log dir.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from storage_core.errors import ConfigError
from storage_core.formats.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    EpochEntry,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
    topic_id_to_string,
)
from storage_core.formats.indexes import AbortedTxn, iter_txn_index
from storage_core.formats.segment_files import (
    CLUSTER_METADATA_TOPIC,
    SegmentFileKind,
    TopicPartition,
    parse_partition_dir_name,
    parse_segment_file_name,
    segment_file_name,
)


@dataclass(frozen=True, slots=True)
class LocalSegment:
    """A segment file set on the broker's disk, identified by its base offset."""

    base_offset: int
    log_size: int

    def path(self, partition_dir: Path, kind: SegmentFileKind) -> Path:
        return partition_dir / segment_file_name(self.base_offset, kind)


@dataclass(frozen=True)
class PartitionDir:
    """One live partition directory of a log dir."""

    tp: TopicPartition
    path: Path

    @property
    def topic(self) -> str:
        return self.tp.topic

    @property
    def partition(self) -> int:
        return self.tp.partition

    def topic_id(self) -> uuid.UUID:
        """From ``partition.metadata``; a partition dir without one cannot be tiered safely."""
        path = self.path / PARTITION_METADATA
        if not path.exists():
            raise ConfigError(f"{self.tp}: no {PARTITION_METADATA} in {self.path} (not a KRaft log dir?)")
        return read_partition_metadata(path)

    def topic_id_string(self) -> str:
        return topic_id_to_string(self.topic_id())

    def segments(self) -> list[LocalSegment]:
        """Segments in base-offset order; the last one is the active segment."""
        found: list[LocalSegment] = []
        with os.scandir(self.path) as entries:
            for entry in entries:
                parsed = parse_segment_file_name(entry.name)
                if parsed is not None and parsed.kind is SegmentFileKind.LOG:
                    try:
                        size = entry.stat().st_size
                    except FileNotFoundError:
                        continue  # deleted by the broker's retention while we looked
                    found.append(LocalSegment(parsed.base_offset, size))
        return sorted(found, key=lambda s: s.base_offset)

    def leader_epochs(self) -> list[EpochEntry]:
        path = self.path / LEADER_EPOCH_CHECKPOINT
        return read_leader_epoch_checkpoint(path) if path.exists() else []

    def aborted_transactions(self) -> list[AbortedTxn]:
        """Every aborted transaction recorded in any of the partition's ``.txnindex`` files."""
        out: list[AbortedTxn] = []
        for txn_path in sorted(self.path.glob("*" + SegmentFileKind.TXN_INDEX.value)):
            try:
                with open(txn_path, "rb") as f:
                    out.extend(iter_txn_index(f, path=str(txn_path)))
            except FileNotFoundError:
                continue
        return out

    def producer_snapshot(self, offset: int) -> Path | None:
        path = self.path / segment_file_name(offset, SegmentFileKind.PRODUCER_SNAPSHOT)
        return path if path.exists() else None


@dataclass(frozen=True)
class LogDirCheckpoints:
    high_watermarks: dict[TopicPartition, int]
    recovery_points: dict[TopicPartition, int]
    log_start_offsets: dict[TopicPartition, int]
    cleaner_offsets: dict[TopicPartition, int]
    """Partitions the log cleaner has compacted: local evidence of ``cleanup.policy=compact``."""


class LogDir:
    """A broker log dir (one entry of ``log.dirs``)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise ConfigError(f"log dir {self.path} does not exist or is not a directory")

    def partitions(self, topics: set[str] | None = None) -> list[PartitionDir]:
        out: list[PartitionDir] = []
        for entry in sorted(os.listdir(self.path)):
            tp = parse_partition_dir_name(entry)
            if tp is None or tp.topic == CLUSTER_METADATA_TOPIC:
                continue
            if topics is not None and tp.topic not in topics:
                continue
            if (self.path / entry).is_dir():
                out.append(PartitionDir(tp, self.path / entry))
        return out

    def checkpoints(self) -> LogDirCheckpoints:
        def read(name: str) -> dict[TopicPartition, int]:
            path = self.path / name
            return read_offset_checkpoint(path) if path.exists() else {}

        return LogDirCheckpoints(
            high_watermarks=read(REPLICATION_OFFSET_CHECKPOINT),
            recovery_points=read(RECOVERY_POINT_OFFSET_CHECKPOINT),
            log_start_offsets=read(LOG_START_OFFSET_CHECKPOINT),
            cleaner_offsets=read(CLEANER_OFFSET_CHECKPOINT),
        )
