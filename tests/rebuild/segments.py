"""Remote segment metadata for the planner tests, built from sizes, timestamps and epochs."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import NamedTuple

from storage_core.remote.layout import SegmentObject, SegmentState
from storage_core.remote.metadata import Manifest, SegmentMetadata, StoredObject

TOPIC = "orders"
TOPIC_ID = "AAAAAAAAQACAAAAAAAAAAQ"
OTHER_TOPIC_ID = "BBBBBBBBQACAAAAAAAAAAQ"


class Seg(NamedTuple):
    records: int
    size: int
    max_ts: int
    snapshot: bool = True


def build_segments(
    specs: Sequence[Seg],
    *,
    start: int = 0,
    partition: int = 0,
    topic_id: str = TOPIC_ID,
    epochs_every: int = 4,
) -> list[SegmentMetadata]:
    """Contiguous segments from ``start``; a new leader epoch begins every ``epochs_every`` segments."""
    out: list[SegmentMetadata] = []
    offset = start
    epochs: list[tuple[int, int]] = []
    for i, spec in enumerate(specs):
        if i % epochs_every == 0:
            epochs.append((len(epochs), offset))
        objects = {
            SegmentObject.LOG: StoredObject(size=spec.size, crc32c=i),
            SegmentObject.OFFSET_INDEX: StoredObject(size=8 * (i % 5), crc32c=None),
            SegmentObject.TIME_INDEX: StoredObject(size=12 * (i % 5), crc32c=None),
        }
        if spec.snapshot:
            objects[SegmentObject.PRODUCER_SNAPSHOT] = StoredObject(size=10 + 46 * (i % 3), crc32c=None)
        out.append(
            SegmentMetadata(
                topic=TOPIC,
                topic_id=topic_id,
                partition=partition,
                segment_id=uuid.UUID(int=i + 1),
                base_offset=offset,
                end_offset=offset + spec.records - 1,
                next_offset=offset + spec.records,
                max_timestamp=spec.max_ts,
                size_bytes=spec.size,
                leader_epochs=list(epochs),
                state=SegmentState.COPY_FINISHED,
                objects=objects,
            )
        )
        offset += spec.records
    return out


def manifest_of(segments: list[SegmentMetadata], *, partition: int = 0, topic_id: str = TOPIC_ID) -> Manifest:
    return Manifest(topic=TOPIC, topic_id=topic_id, partition=partition, segments=segments)
