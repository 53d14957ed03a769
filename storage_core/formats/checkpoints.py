"""Kafka's small text files: log-dir offset checkpoints, ``leader-epoch-checkpoint`` and
``partition.metadata``, with readers and crash-safe writers (rebuild writes them).

Offset checkpoints (``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``) and the leader-epoch checkpoint share one
shape: a version line (0), a count line, then one entry per line with whitespace-separated fields
(``topic partition offset`` and ``epoch startOffset``). Like Kafka, an empty file (or one with only a
version) reads as no entries. Topic names cannot contain whitespace, which is what makes the format
unambiguous.

``partition.metadata`` is exactly ``version: 0\\ntopic_id: <id>`` with no trailing newline, the id
being the topic UUID in Kafka's form: URL-safe base64 of its 16 bytes, unpadded (22 characters).
"""

from __future__ import annotations

import base64
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from storage_core.errors import CorruptDataError
from storage_core.formats.segment_files import TopicPartition, is_valid_topic_name

CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
"""Written by the log cleaner for the partitions it compacts (same format as the others)."""
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"

_FIELD_SEP = re.compile(r"\s+")
_METADATA_SEP = re.compile(r":\s+")


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


def topic_id_to_string(topic_id: uuid.UUID) -> str:
    """Kafka's string form of a topic id (22 URL-safe base64 characters)."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def topic_id_from_string(text: str) -> uuid.UUID:
    """Parse Kafka's string form of a topic id; ``ValueError`` if it is not one."""
    if len(text) != 22 or not re.fullmatch(r"[A-Za-z0-9_-]{22}", text):
        raise ValueError(f"not a Kafka topic id: {text!r}")
    raw = base64.urlsafe_b64decode(text + "==")
    topic_id = uuid.UUID(bytes=raw)
    if topic_id_to_string(topic_id) != text:
        # The last character carries 2 spare bits; only one spelling round-trips.
        raise ValueError(f"not a canonical Kafka topic id: {text!r}")
    return topic_id


def _checkpoint_lines(text: str, path: str | None) -> list[list[str]]:
    lines = text.splitlines()
    if not lines:
        return []
    header = lines[0].strip()
    if header != str(CHECKPOINT_VERSION):
        raise CorruptDataError(f"checkpoint version {header!r} is not {CHECKPOINT_VERSION}", path=path)
    if len(lines) == 1:
        return []
    try:
        expected = int(lines[1].strip())
    except ValueError:
        raise CorruptDataError(f"malformed checkpoint count line {lines[1]!r}", path=path) from None
    entries = [_FIELD_SEP.split(line.strip()) for line in lines[2:]]
    if len(entries) != expected:
        raise CorruptDataError(f"checkpoint declares {expected} entries but holds {len(entries)}", path=path)
    return entries


def _int_field(text: str, line: list[str], path: str | None) -> int:
    try:
        return int(text)
    except ValueError:
        raise CorruptDataError(f"malformed checkpoint line {' '.join(line)!r}", path=path) from None


def parse_offset_checkpoint(text: str, *, path: str | None = None) -> dict[TopicPartition, int]:
    """Entries of an offset checkpoint file's text."""
    result: dict[TopicPartition, int] = {}
    for fields in _checkpoint_lines(text, path):
        if len(fields) != 3:
            raise CorruptDataError(f"malformed checkpoint line {' '.join(fields)!r}", path=path)
        tp = TopicPartition(fields[0], _int_field(fields[1], fields, path))
        result[tp] = _int_field(fields[2], fields, path)
    return result


def format_offset_checkpoint(entries: Mapping[TopicPartition, int]) -> str:
    """Text of an offset checkpoint file (entries sorted, so equal content gives equal bytes)."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    for tp in sorted(entries):
        if not is_valid_topic_name(tp.topic):
            raise ValueError(f"invalid topic name {tp.topic!r}")
        lines.append(f"{tp.topic} {tp.partition} {entries[tp]}")
    return "\n".join(lines) + "\n"


def parse_leader_epoch_checkpoint(text: str, *, path: str | None = None) -> list[EpochEntry]:
    """Entries of a ``leader-epoch-checkpoint`` file's text, in file order."""
    result: list[EpochEntry] = []
    for fields in _checkpoint_lines(text, path):
        if len(fields) != 2:
            raise CorruptDataError(f"malformed leader epoch line {' '.join(fields)!r}", path=path)
        result.append(EpochEntry(_int_field(fields[0], fields, path), _int_field(fields[1], fields, path)))
    return result


def format_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> str:
    """Text of a ``leader-epoch-checkpoint`` file, entries in the given order."""
    items = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(items))]
    lines.extend(f"{entry.epoch} {entry.start_offset}" for entry in items)
    return "\n".join(lines) + "\n"


def parse_partition_metadata(text: str, *, path: str | None = None) -> uuid.UUID:
    """The topic id in a ``partition.metadata`` file's text."""
    lines = text.splitlines()
    version_fields = _METADATA_SEP.split(lines[0]) if lines else []
    if len(version_fields) != 2 or version_fields[0] != "version":
        raise CorruptDataError("partition.metadata does not start with a version line", path=path)
    if version_fields[1].strip() != str(PARTITION_METADATA_VERSION):
        raise CorruptDataError(f"unknown partition.metadata version {version_fields[1]!r}", path=path)
    id_fields = _METADATA_SEP.split(lines[1]) if len(lines) > 1 else []
    if len(id_fields) != 2 or id_fields[0] != "topic_id":
        raise CorruptDataError("partition.metadata has no topic_id line", path=path)
    try:
        topic_id = topic_id_from_string(id_fields[1].strip())
    except ValueError as exc:
        raise CorruptDataError(f"partition.metadata: {exc}", path=path) from None
    if topic_id.int == 0:
        raise CorruptDataError("partition.metadata holds the zero topic id", path=path)
    return topic_id


def format_partition_metadata(topic_id: uuid.UUID) -> str:
    """Text of a ``partition.metadata`` file, byte for byte what Kafka writes."""
    return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {topic_id_to_string(topic_id)}"


def write_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` so a crash leaves either the old file or the new one.

    Writes ``<path>.tmp``, fsyncs it, renames it over ``path`` and fsyncs the directory, as Kafka does
    for its own checkpoints.
    """
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read(path: str | os.PathLike[str]) -> str:
    return Path(path).read_text(encoding="utf-8")


def read_offset_checkpoint(path: str | os.PathLike[str]) -> dict[TopicPartition, int]:
    return parse_offset_checkpoint(_read(path), path=os.fspath(path))


def write_offset_checkpoint(path: str | os.PathLike[str], entries: Mapping[TopicPartition, int]) -> None:
    write_atomically(path, format_offset_checkpoint(entries))


def read_leader_epoch_checkpoint(path: str | os.PathLike[str]) -> list[EpochEntry]:
    return parse_leader_epoch_checkpoint(_read(path), path=os.fspath(path))


def write_leader_epoch_checkpoint(path: str | os.PathLike[str], entries: Iterable[EpochEntry]) -> None:
    write_atomically(path, format_leader_epoch_checkpoint(entries))


def read_partition_metadata(path: str | os.PathLike[str]) -> uuid.UUID:
    return parse_partition_metadata(_read(path), path=os.fspath(path))


def write_partition_metadata(path: str | os.PathLike[str], topic_id: uuid.UUID) -> None:
    write_atomically(path, format_partition_metadata(topic_id))
