"""Remote segment metadata (RemoteLogSegmentMetadata in KIP-405 terms) and the partition manifest.

Each state change of a segment is a new immutable marker object holding the full metadata; the current
state of a segment is its highest marker. Nothing is ever updated in place, so a crash can only leave a
missing marker, never a half-updated one, and COPY_FINISHED is written only after every object of the
segment is stored and its size checked. Readers trust COPY_FINISHED and nothing else.

The manifest lists a partition's readable segments so a read needs one GET instead of a listing. It is
derived data: rebuilt from the markers whenever it is missing, unreadable or stale.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from storage_core.remote.layout import SegmentObject, SegmentState, TopicPartitionId

MANIFEST_VERSION = 1


class StoredObject(BaseModel):
    model_config = ConfigDict(frozen=True)

    size: int = Field(ge=0)
    crc32c: int | None = Field(default=None, description="CRC-32C of the whole object (small objects)")
    batch_chain_crc32c: int | None = Field(
        default=None,
        description="`.log` objects: CRC-32C over the first 21 bytes of every record batch in order, which "
        "include each batch's own CRC-32C of the rest (storage_core.formats.batch_chain)",
    )


class SegmentMetadata(BaseModel):
    """Everything a reader, the retention planner and a rebuild need to know about one remote segment."""

    model_config = ConfigDict(frozen=True)

    version: int = 1
    topic: str
    topic_id: str
    partition: int = Field(ge=0)
    segment_id: uuid.UUID
    base_offset: int = Field(ge=0)
    end_offset: int = Field(ge=-1, description="last offset in the segment (inclusive)")
    next_offset: int = Field(ge=0, description="base offset of the segment that followed it on the broker")
    max_timestamp: int = -1
    first_timestamp: int = -1
    size_bytes: int = Field(ge=0)
    record_count: int = Field(ge=0, default=0)
    has_transactions: bool = False
    leader_epochs: list[tuple[int, int]] = Field(
        default_factory=list, description="(epoch, start offset) entries up to this segment's end"
    )
    broker_id: int | None = None
    state: SegmentState = SegmentState.COPY_STARTED
    objects: dict[SegmentObject, StoredObject] = Field(default_factory=dict)
    event_time_ms: int = 0

    @property
    def tp(self) -> TopicPartitionId:
        return TopicPartitionId(self.topic, self.topic_id, self.partition)

    def with_state(self, state: SegmentState, event_time_ms: int, **changes: object) -> SegmentMetadata:
        return self.model_copy(update={"state": state, "event_time_ms": event_time_ms, **changes})


def readable_segments(states: Iterable[SegmentMetadata]) -> list[SegmentMetadata]:
    """COPY_FINISHED segments in offset order, one per offset range.

    Two finished copies of the same broker segment (a retried or concurrent copy) hold identical data;
    the earliest finished one wins so readers are deterministic. A copy whose range is covered by an
    earlier one is dropped.
    """
    finished = sorted(
        (m for m in states if m.state is SegmentState.COPY_FINISHED),
        key=lambda m: (m.base_offset, m.event_time_ms, str(m.segment_id)),
    )
    out: list[SegmentMetadata] = []
    for m in finished:
        if out and m.end_offset <= out[-1].end_offset:
            continue
        out.append(m)
    return out


class Manifest(BaseModel):
    """The readable (COPY_FINISHED) segments of one partition, ordered by base offset."""

    version: int = MANIFEST_VERSION
    topic: str
    topic_id: str
    partition: int
    segments: list[SegmentMetadata] = Field(default_factory=list)

    @property
    def start_offset(self) -> int | None:
        return self.segments[0].base_offset if self.segments else None

    @property
    def end_offset(self) -> int | None:
        """Last offset held remotely (inclusive), or None when nothing is tiered."""
        return self.segments[-1].end_offset if self.segments else None

    def segment_for_offset(self, offset: int) -> int | None:
        """Index of the first segment whose end offset is >= ``offset`` (binary search), else None."""
        ends = [s.end_offset for s in self.segments]
        i = bisect.bisect_left(ends, offset)
        return i if i < len(self.segments) else None

    def segment_for_timestamp(self, timestamp: int) -> int | None:
        """Index of the first segment holding a record with timestamp >= ``timestamp``, else None.

        Timestamps are not monotonic across segments, so this is a scan over the manifest (kept in
        memory, one entry per segment), never over data.
        """
        for i, s in enumerate(self.segments):
            if s.max_timestamp >= timestamp:
                return i
        return None


class PartitionState(BaseModel):
    """Facts about a partition that Tierkeeper itself caused, so it can tell them from others' actions."""

    local_trim_offset: int | None = Field(
        default=None,
        description="highest offset Tierkeeper asked Kafka to DeleteRecords to (written before the call)",
    )
