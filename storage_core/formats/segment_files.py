"""Names of the files in a Kafka log dir: partition directories and per-segment files.

A partition directory is ``<topic>-<partition>``; directories Kafka is about to delete, is moving in
from another log dir, or has disowned carry ``.<id>-delete``, ``.<id>-future`` or ``-stray`` and are
not live partitions. Segment files are named by the segment's base offset, zero-padded to 20 digits,
plus a suffix; files mid-way through a Kafka operation add a second suffix (``.deleted``, ``.cleaned``,
``.swap``) and are not part of the log either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

OFFSET_DIGITS = 20
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
"""The KRaft metadata log lives in a log dir too but is not a data partition."""
KAFKA_INTERNAL_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state", "__remote_log_metadata"}
)
"""Topics Kafka itself keeps (group offsets, transactions, share groups, KIP-405's metadata): compacted or
Kafka's own bookkeeping, never tiering candidates, and present in the log dir of every broker that
served them."""
NON_LIVE_DIR_SUFFIXES = ("-delete", "-future", "-stray")
PENDING_FILE_SUFFIXES = (".deleted", ".cleaned", ".swap")

_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_SEGMENT_FILE = re.compile(r"(\d{20})(\.[a-z]+)")


class SegmentFileKind(Enum):
    """The per-segment files, by suffix."""

    LOG = ".log"
    INDEX = ".index"
    TIME_INDEX = ".timeindex"
    TXN_INDEX = ".txnindex"
    PRODUCER_SNAPSHOT = ".snapshot"


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A topic name and partition number."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True, order=True)
class SegmentFileName:
    """A parsed segment file name."""

    base_offset: int
    kind: SegmentFileKind

    def __str__(self) -> str:
        return segment_file_name(self.base_offset, self.kind)


def is_valid_topic_name(topic: str) -> bool:
    """Kafka's legal topic names: 1-249 of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    return bool(_TOPIC_CHARS.fullmatch(topic)) and topic not in (".", "..")


def offset_prefix(offset: int) -> str:
    """The 20-digit zero-padded form Kafka uses in file names."""
    if offset < 0:
        raise ValueError(f"offsets in file names are non-negative, got {offset}")
    return f"{offset:0{OFFSET_DIGITS}d}"


def segment_file_name(base_offset: int, kind: SegmentFileKind) -> str:
    """E.g. ``segment_file_name(42, SegmentFileKind.LOG) == "00000000000000000042.log"``."""
    return offset_prefix(base_offset) + kind.value


def parse_segment_file_name(name: str) -> SegmentFileName | None:
    """Parse a segment file name; None for anything else (including ``.deleted``/``.swap`` leftovers)."""
    match = _SEGMENT_FILE.fullmatch(name)
    if match is None:
        return None
    try:
        kind = SegmentFileKind(match.group(2))
    except ValueError:
        return None
    return SegmentFileName(int(match.group(1)), kind)


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """The partition of a live partition directory; None for non-live or unrelated directories.

    Topics may contain ``-`` themselves, so the partition is what follows the last one.
    """
    if name.endswith(NON_LIVE_DIR_SUFFIXES):
        return None
    topic, sep, partition = name.rpartition("-")
    if not sep or not partition.isdigit() or not partition.isascii() or not is_valid_topic_name(topic):
        return None
    return TopicPartition(topic, int(partition))
