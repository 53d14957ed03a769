"""Finished remote segments for the pure retention tests."""

from __future__ import annotations

import uuid

from storage_core.remote.layout import SegmentState, TopicPartitionId
from storage_core.remote.metadata import SegmentMetadata

TP = TopicPartitionId("t", "AAAAAAAAAAAAAAAAAAAAAA", 0)


def finished_segment(base: int, nxt: int, ts: int = 1000, size: int = 100) -> SegmentMetadata:
    """A COPY_FINISHED segment of ``TP`` holding offsets [base, nxt), newest record at ``ts``."""
    return SegmentMetadata(
        topic=TP.topic, topic_id=TP.topic_id, partition=0, segment_id=uuid.uuid4(), base_offset=base,
        end_offset=nxt - 1, next_offset=nxt, max_timestamp=ts, size_bytes=size,
        state=SegmentState.COPY_FINISHED,
    )  # fmt: skip
