"""Object keys of the remote tier: the one definition of where every remote object lives.

``<prefix>/<topic>-<topicId>/<partition>/<20-digit base offset>-<segment id>.<ext>``; documented in
docs/remote-layout.md. The topic id is Kafka's 22-character url-safe base64 form, so a deleted and
recreated topic of the same name never mixes with its predecessor's data.

Every component is checked here before it becomes part of a key (:func:`check_topic` and friends), so no
key can leave its prefix or land in another topic's place: a topic name must be one Kafka allows
(1-249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``, so never ``/``, ``%``, NUL or a parent reference), a
topic id 22 base64url characters, partitions and offsets non-negative integers, segment ids UUIDs. A
name read back from a listing is checked the same way (:func:`parse_topic_dir`).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from enum import Enum

from storage_core.errors import ConfigError
from storage_core.formats.segment_files import TopicPartition, is_valid_topic_name

OFFSET_DIGITS = 20
RECOVERY_DIR = "recovery"
"""Under a topic incarnation's dir: ``recovery/<target topic id>/`` holds a topic recovery's state."""
_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{22}")


class UnsafeKeyError(ConfigError):
    """A key component that could escape its place in the remote tier (a hostile or broken name)."""


def check_topic(topic: str) -> str:
    if not isinstance(topic, str) or not is_valid_topic_name(topic):
        raise UnsafeKeyError(
            f"topic name {_shown(topic)} is not a legal Kafka topic name (1-249 of [a-zA-Z0-9._-], "
            "not '.' or '..'); refusing to use it in a remote key"
        )
    return topic


def check_topic_id(topic_id: str) -> str:
    if not isinstance(topic_id, str) or not _TOPIC_ID.fullmatch(topic_id):
        raise UnsafeKeyError(f"topic id {_shown(topic_id)} is not 22 base64url characters")
    return topic_id


def check_non_negative(what: str, value: int) -> int:
    if type(value) is not int or value < 0:
        raise UnsafeKeyError(f"{what} {_shown(value)} is not a non-negative integer")
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


class SegmentObject(str, Enum):
    """The objects one tiered segment consists of (the value is the key's extension)."""

    LOG = "log"
    OFFSET_INDEX = "index"
    TIME_INDEX = "timeindex"
    TXN_INDEX = "txnindex"
    PRODUCER_SNAPSHOT = "snapshot"
    LEADER_EPOCHS = "leader-epoch-checkpoint"
    REMOTE_LOG_INDEX = "remoteLogIndex"
    REMOTE_OFFSET_INDEX = "remoteOffsetIndex"
    REMOTE_TIME_INDEX = "remoteTimeIndex"


class SegmentState(str, Enum):
    """Lifecycle of a remote segment; each state is an immutable marker object, never overwritten."""

    COPY_STARTED = "COPY_STARTED"
    COPY_FINISHED = "COPY_FINISHED"
    QUARANTINED = "QUARANTINED"
    """Scrub found the finished segment damaged: no reader serves it, nothing deletes it; releasing it
    (deleting this marker) makes it COPY_FINISHED again (remote/scrub.py)."""
    DELETE_STARTED = "DELETE_STARTED"
    DELETE_FINISHED = "DELETE_FINISHED"


STATE_ORDER = {s: i for i, s in enumerate(SegmentState)}
MARKER_SUFFIX = ".json"
MANIFEST_NAME = "segments.manifest.json"
PARTITION_STATE_NAME = "partition-state.json"
TRIM_HOLD_STATE_NAME = "trim-hold-groups.json"
"""Under a topic incarnation's dir: what cleanup remembers of the consumer groups that hold its trim."""

_SEGMENT_NAME = re.compile(
    r"^(?P<base>\d{20})-(?P<segid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.(?P<ext>.+)$"
)


@dataclass(frozen=True, slots=True)
class TopicPartitionId:
    """A partition of a topic incarnation: name, Kafka topic id (base64url) and partition number."""

    topic: str
    topic_id: str
    partition: int

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition without its incarnation, as a broker's log dir names it."""
        return TopicPartition(self.topic, self.partition)

    def __str__(self) -> str:
        return str(self.topic_partition)


@dataclass(frozen=True, slots=True)
class ParsedName:
    base_offset: int
    segment_id: uuid.UUID
    ext: str


@dataclass(frozen=True, slots=True)
class RemoteLayout:
    """Key builder for one remote tier rooted at ``root`` (a bucket path without protocol)."""

    root: str

    def topic_dir(self, topic: str, topic_id: str) -> str:
        return f"{self._root()}{check_topic(topic)}-{check_topic_id(topic_id)}"

    def partition_dir(self, tp: TopicPartitionId) -> str:
        return f"{self.topic_dir(tp.topic, tp.topic_id)}/{check_non_negative('partition', tp.partition)}"

    def segment_stem(self, tp: TopicPartitionId, base_offset: int, segment_id: uuid.UUID) -> str:
        if not isinstance(segment_id, uuid.UUID):
            raise UnsafeKeyError(f"segment id {_shown(segment_id)} is not a UUID")
        base = check_non_negative("base offset", base_offset)
        return f"{self.partition_dir(tp)}/{base:0{OFFSET_DIGITS}d}-{segment_id}"

    def recovery_dir(self, topic: str, source_topic_id: str, target_topic_id: str) -> str:
        """Where a recovery of incarnation ``source_topic_id`` into ``target_topic_id`` keeps its state."""
        return f"{self.topic_dir(topic, source_topic_id)}/{RECOVERY_DIR}/{check_topic_id(target_topic_id)}"

    def object_key(
        self, tp: TopicPartitionId, base_offset: int, segment_id: uuid.UUID, obj: SegmentObject
    ) -> str:
        return f"{self.segment_stem(tp, base_offset, segment_id)}.{obj.value}"

    def marker_key(
        self, tp: TopicPartitionId, base_offset: int, segment_id: uuid.UUID, state: SegmentState
    ) -> str:
        return f"{self.segment_stem(tp, base_offset, segment_id)}.{state.value}{MARKER_SUFFIX}"

    def manifest_key(self, tp: TopicPartitionId) -> str:
        return f"{self.partition_dir(tp)}/{MANIFEST_NAME}"

    def partition_state_key(self, tp: TopicPartitionId) -> str:
        return f"{self.partition_dir(tp)}/{PARTITION_STATE_NAME}"

    def trim_hold_state_key(self, topic: str, topic_id: str) -> str:
        return f"{self.topic_dir(topic, topic_id)}/{TRIM_HOLD_STATE_NAME}"

    def _root(self) -> str:
        root = self.root.rstrip("/")
        return f"{root}/" if root else ""


def parse_object_name(name: str) -> ParsedName | None:
    """Split ``<base>-<segid>.<ext>`` (the last path element); None for anything else (manifest, strays)."""
    match = _SEGMENT_NAME.match(name.rsplit("/", 1)[-1])
    if match is None:
        return None
    return ParsedName(int(match["base"]), uuid.UUID(match["segid"]), match["ext"])


def marker_state(ext: str) -> SegmentState | None:
    """The state a marker extension names (``COPY_FINISHED.json`` -> COPY_FINISHED), else None."""
    if not ext.endswith(MARKER_SUFFIX):
        return None
    try:
        return SegmentState(ext[: -len(MARKER_SUFFIX)])
    except ValueError:
        return None


def parse_topic_dir(name: str) -> tuple[str, str] | None:
    """``<topic>-<topicId>`` -> (topic, topic id); topic ids are 22 base64url characters."""
    name = name.rstrip("/").rsplit("/", 1)[-1]
    if len(name) < 24 or name[-23] != "-":
        return None
    topic, topic_id = name[:-23], name[-22:]
    if not _TOPIC_ID.fullmatch(topic_id) or not is_valid_topic_name(topic):
        return None  # not ours (or planted): never turned into keys
    return topic, topic_id
