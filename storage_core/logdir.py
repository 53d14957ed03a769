"""Reading a broker's log dirs from outside the broker: partitions, segments, checkpoints.

Only live partition directories count: ``-delete``, ``-future`` and ``-stray`` directories and the
``__cluster_metadata`` log are skipped. Nothing here writes to the log dir.

Layer: building blocks (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
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

FUTURE_DIR_SUFFIX = "-future"
"""A partition being moved into this dir from another of the broker's dirs: ``<tp>.<id>-future``."""


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


class LogDirs:
    """All of a broker's log dirs (``log.dirs``; several with JBOD). Kafka keeps each partition in exactly
    one of them, so a partition is read from whichever dir holds it, with that dir's checkpoints."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]]) -> None:
        if not paths:
            raise ConfigError("no log dir given")
        self.dirs = [LogDir(p) for p in paths]
        if len({d.path.resolve() for d in self.dirs}) != len(self.dirs):
            raise ConfigError(f"a log dir is named twice: {', '.join(str(d.path) for d in self.dirs)}")

    def describe(self) -> str:
        return ", ".join(str(d.path) for d in self.dirs)

    def partitions(self, topics: set[str] | None = None) -> list[PartitionDir]:
        """Every live partition of every dir; a partition live in two dirs is refused (Kafka itself
        refuses to start with one)."""
        seen: dict[TopicPartition, PartitionDir] = {}
        for log_dir in self.dirs:
            for pdir in log_dir.partitions(topics):
                if pdir.tp in seen:
                    raise ConfigError(
                        f"{pdir.tp}: live in two log dirs ({seen[pdir.tp].path.parent} and {log_dir.path})"
                    )
                seen[pdir.tp] = pdir
        return sorted(seen.values(), key=lambda p: (p.topic, p.partition))

    def dir_of(self, tp: TopicPartition) -> LogDir | None:
        """The dir holding ``tp``'s live partition directory, if any."""
        for log_dir in self.dirs:
            if (log_dir.path / f"{tp.topic}-{tp.partition}").is_dir():
                return log_dir
        return None

    def moving(self, topics: set[str] | None = None) -> set[TopicPartition]:
        """Partitions being moved between this broker's dirs (a ``-future`` directory: Kafka's
        AlterReplicaLogDirs, as kafka-reassign-partitions with log dirs issues it)."""
        out: set[TopicPartition] = set()
        for log_dir in self.dirs:
            for entry in os.listdir(log_dir.path):
                if not entry.endswith(FUTURE_DIR_SUFFIX):
                    continue
                # <topic>-<partition>.<unique id>-future
                base = entry[: -len(FUTURE_DIR_SUFFIX)].rsplit(".", 1)[0]
                tp = parse_partition_dir_name(base)
                if tp is not None and (topics is None or tp.topic in topics):
                    out.add(tp)
        return out

    def checkpoints(self) -> LogDirCheckpoints:
        """Each partition's entries from the dir that holds it (a dir's checkpoint can keep a stale entry
        for a partition moved away from it until the broker writes it again)."""
        holder = {p.tp: p.path.parent for p in self.partitions()}
        merged = LogDirCheckpoints({}, {}, {}, {})
        for log_dir in self.dirs:
            own = log_dir.checkpoints()
            for name in ("high_watermarks", "recovery_points", "log_start_offsets", "cleaner_offsets"):
                target: dict[TopicPartition, int] = getattr(merged, name)
                for tp, value in getattr(own, name).items():
                    if holder.get(tp, log_dir.path) == log_dir.path:
                        target[tp] = value
        return merged
