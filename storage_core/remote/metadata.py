"""Remote segment metadata (RemoteLogSegmentMetadata in KIP-405 terms) and the partition manifest.

Each state change of a segment is a new immutable marker object holding the full metadata; the current
state of a segment is its highest marker. Nothing is ever updated in place, so a crash can only leave a
missing marker, never a half-updated one, and COPY_FINISHED is written only after every object of the
segment is stored and its size checked. Readers trust COPY_FINISHED and nothing else.

The manifest lists a partition's readable segments so a read needs one GET instead of a listing. It is
derived data: rebuilt from the markers whenever it is missing, unreadable or stale.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from storage_core.remote.cover import Cover, resolve_cover
from storage_core.remote.layout import SegmentObject, SegmentState, TopicPartitionId

MANIFEST_VERSION = 1


class StoredObject(BaseModel):
    model_config = ConfigDict(frozen=True)

    size: int = Field(ge=0)
    crc32c: int | None = None
    """CRC-32C of the whole object (small objects)."""
    batch_chain_crc32c: int | None = None
    """`.log` objects: CRC-32C over the first 21 bytes of every record batch in order, which include each
    batch's own CRC-32C of the rest (:mod:`storage_core.formats.batch_chain`)."""


class SegmentMetadata(BaseModel):
    """Everything a reader, the retention planner and a rebuild need to know about one remote segment."""

    model_config = ConfigDict(frozen=True)

    version: int = 1
    topic: str
    topic_id: str
    partition: int = Field(ge=0)
    segment_id: uuid.UUID
    base_offset: int = Field(ge=0)
    end_offset: int = Field(ge=-1)
    """Last offset in the segment (inclusive)."""
    next_offset: int = Field(ge=0)
    """Base offset of the segment that followed it on the broker."""
    max_timestamp: int = -1
    first_timestamp: int = -1
    size_bytes: int = Field(ge=0)
    record_count: int = Field(ge=0, default=0)
    has_transactions: bool = False
    leader_epochs: list[tuple[int, int]] = Field(default_factory=list)
    """(epoch, start offset) entries up to this segment's end."""
    broker_id: int | None = None
    state: SegmentState = SegmentState.COPY_STARTED
    objects: dict[SegmentObject, StoredObject] = Field(default_factory=dict)
    event_time_ms: int = 0
    problem: str | None = None
    """QUARANTINED markers: the damage scrub found."""

    @property
    def tp(self) -> TopicPartitionId:
        return TopicPartitionId(self.topic, self.topic_id, self.partition)

    def with_state(self, state: SegmentState, event_time_ms: int, **changes: object) -> SegmentMetadata:
        return self.model_copy(update={"state": state, "event_time_ms": event_time_ms, **changes})


class Manifest(BaseModel):
    """The readable (COPY_FINISHED) segments of one partition, resolved by the cover rule (cover.py).

    ``segments`` are the ones serving at least one offset, in offset order (their end offsets strictly
    increase); ``shadowed`` the finished ones serving none, kept so divergent copies stay visible and so
    cleanup knows what it may delete. ``cover()`` says which offsets each segment serves; it is computed
    once per object, so a manifest is never changed in place: build another with ``Manifest.of``.
    """

    version: int = MANIFEST_VERSION
    topic: str
    topic_id: str
    partition: int
    segments: list[SegmentMetadata] = Field(default_factory=list)
    shadowed: list[SegmentMetadata] = Field(default_factory=list)
    _cover: Cover | None = PrivateAttr(default=None)

    @classmethod
    def of(cls, tp: TopicPartitionId, finished: Iterable[SegmentMetadata]) -> Manifest:
        """The manifest of ``finished`` segments (any order; only COPY_FINISHED ones count)."""
        cover = resolve_cover(finished)
        manifest = cls(
            topic=tp.topic,
            topic_id=tp.topic_id,
            partition=tp.partition,
            segments=cover.segments,
            shadowed=list(cover.shadowed),
        )
        manifest._cover = cover
        return manifest

    def cover(self) -> Cover:
        """The served ranges of this partition (computed once per manifest object)."""
        if self._cover is None:
            self._cover = resolve_cover([*self.segments, *self.shadowed])
        return self._cover

    def finished(self) -> list[SegmentMetadata]:
        """Every finished segment the manifest knows, serving or shadowed."""
        return [*self.segments, *self.shadowed]

    @property
    def start_offset(self) -> int | None:
        return self.cover().start_offset

    @property
    def end_offset(self) -> int | None:
        """Last offset held remotely (inclusive), or None when nothing is tiered."""
        return self.cover().end_offset

    @property
    def next_offset(self) -> int | None:
        """One past the last tiered offset (None when nothing is tiered): where copying continues."""
        return self.cover().next_offset


class PartitionState(BaseModel):
    """Facts about a partition that Tierkeeper itself caused, so it can tell them from others' actions."""

    local_trim_offset: int | None = None
    """Highest offset Tierkeeper asked Kafka to DeleteRecords to (written before the call)."""
    retention_expired_offset: int | None = None
    """Every offset below it was tiered and then expired by remote retention (written by cleanup before it
    deletes the segments): local trim moves the log start up to it, copy never tiers those offsets again."""


class GroupMemory(BaseModel):
    """What cleanup remembers of one consumer group with committed offsets on a topic: what Kafka does not
    say (since when a group is empty, and how its former members read)."""

    empty_since_ms: int | None = None
    """When a cleanup first saw the group with no members (None: it had members when last seen)."""
    direct_seen_ms: int | None = None
    """The last cleanup that saw a member read the brokers directly (no gateway sighting carried it)."""
    gateway_seen_ms: int | None = None
    """The last cleanup that saw the group's members all read through gateways."""
    committed: dict[int, int] = Field(default_factory=dict)
    """Its committed offsets on the topic's partitions when last seen: a group with no members whose
    offsets move is still reading (it assigns partitions and commits, as Flink's Kafka source does)."""


class TrimHoldState(BaseModel):
    """A topic incarnation's ``trim-hold-groups.json``: per group, its :class:`GroupMemory`. Groups that no
    longer exist, or have no committed offset on the topic, are left out."""

    version: int = 1
    groups: dict[str, GroupMemory] = Field(default_factory=dict)
