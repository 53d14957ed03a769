"""Which incarnations of a topic the remote tier holds, and which one a recovery restores.

Layout keys carry the topic id, so every incarnation of a topic name (created, deleted, recreated...)
has its own directory. Manifests are rebuilt from the markers (never written here): recovery only reads
the old incarnation's segment data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from storage_core.errors import ConfigError
from storage_core.remote.catalog import PartitionCatalog, list_partitions, list_topics
from storage_core.remote.layout import RemoteLayout, TopicPartitionId
from storage_core.remote.metadata import Manifest
from storage_core.remote.store_api import ObjectStore


@dataclass(frozen=True)
class PartitionHistory:
    """What one partition of an incarnation holds in the remote tier."""

    tp: TopicPartitionId
    manifest: Manifest

    @property
    def start_offset(self) -> int | None:
        return self.manifest.start_offset

    @property
    def end_offset(self) -> int | None:
        return self.manifest.end_offset

    @property
    def segment_count(self) -> int:
        return len(self.manifest.segments)

    def holes(self) -> list[tuple[int, int]]:
        """Offset ranges missing between readable segments (a segment that never finished copying)."""
        out = []
        segments = self.manifest.segments
        for prev, nxt in zip(segments, segments[1:]):
            if nxt.base_offset > prev.next_offset:
                out.append((prev.next_offset, nxt.base_offset - 1))
        return out


@dataclass(frozen=True)
class Incarnation:
    """One topic id of a topic name in the remote tier, with each tiered partition's history."""

    topic: str
    topic_id: str
    partitions: dict[int, PartitionHistory] = field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        """Partitions the remote tier knows of: the highest tiered partition + 1.

        A trailing partition that never tiered a segment leaves no trace, so this can undercount.
        """
        return max(self.partitions) + 1 if self.partitions else 0

    @property
    def segment_count(self) -> int:
        return sum(h.segment_count for h in self.partitions.values())

    @property
    def has_data(self) -> bool:
        return self.segment_count > 0

    @property
    def last_copy_ms(self) -> int | None:
        times = [s.event_time_ms for h in self.partitions.values() for s in h.manifest.segments]
        return max(times) if times else None

    @property
    def timestamp_range(self) -> tuple[int, int] | None:
        """(oldest first timestamp, newest max timestamp) over every tiered segment, when known."""
        firsts = [
            s.first_timestamp
            for h in self.partitions.values()
            for s in h.manifest.segments
            if s.first_timestamp >= 0
        ]
        lasts = [s.max_timestamp for h in self.partitions.values() for s in h.manifest.segments]
        if not firsts or not lasts:
            return None
        return min(firsts), max(lasts)

    def describe(self) -> str:
        """One line for error messages and the plan: id, offset ranges, segments, last copy."""
        ranges = ", ".join(
            f"p{p}: {h.start_offset}..{h.end_offset}" if h.segment_count else f"p{p}: empty"
            for p, h in sorted(self.partitions.items())
        )
        when = _iso(self.last_copy_ms) if self.last_copy_ms else "never"
        return (
            f"{self.topic_id} ({len(self.partitions)} partitions, {self.segment_count} segments, "
            f"last copy {when}; {ranges})"
        )


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find_incarnations(store: ObjectStore, topic: str) -> list[Incarnation]:
    """Every incarnation of ``topic`` in the remote tier, each partition's manifest rebuilt from markers."""
    layout = RemoteLayout(store.root)
    out = []
    for name, topic_id in list_topics(store, layout):
        if name != topic:
            continue
        partitions = {}
        for tp in list_partitions(store, layout, topic, topic_id):
            manifest = PartitionCatalog(store, layout, tp).rebuild_manifest(write=False, strict=True)
            partitions[tp.partition] = PartitionHistory(tp, manifest)
        out.append(Incarnation(topic, topic_id, partitions))
    return out


def choose_source(
    incarnations: list[Incarnation],
    *,
    topic: str,
    topic_id: str | None,
    live_topic_id: str | None,
    remote_url: str,
) -> Incarnation:
    """The incarnation to recover: the one named by ``topic_id``, else the only one that is not live.

    The live topic's own incarnation (the topic as it exists in Kafka now, tiered after an earlier
    recovery for example) is never a source: its history is still in Kafka.
    """
    if not incarnations:
        raise ConfigError(
            f"topic {topic} has no tiered data in the remote tier {remote_url}; nothing to recover"
        )
    if topic_id is not None:
        chosen = next((i for i in incarnations if i.topic_id == topic_id), None)
        if chosen is None:
            raise ConfigError(
                f"topic {topic} has no incarnation with id {topic_id} in {remote_url}; "
                f"it has: {_listing(incarnations)}"
            )
        if chosen.topic_id == live_topic_id:
            raise ConfigError(
                f"topic {topic} with id {topic_id} still exists in Kafka; only a deleted "
                "incarnation can be recovered (read it with `tierkeeper read`)"
            )
        if not chosen.has_data:
            raise ConfigError(f"topic {topic} incarnation {topic_id} has no finished segment in {remote_url}")
        return chosen
    candidates = [i for i in incarnations if i.topic_id != live_topic_id and i.has_data]
    if not candidates:
        raise ConfigError(
            f"topic {topic} has no deleted incarnation with tiered data in {remote_url} "
            f"(live topic id {live_topic_id}); it has: {_listing(incarnations)}"
        )
    if len(candidates) > 1:
        raise ConfigError(
            f"topic {topic} has {len(candidates)} deleted incarnations in {remote_url}; "
            f"choose one with --topic-id: {_listing(candidates)}"
        )
    return candidates[0]


def _listing(incarnations: list[Incarnation]) -> str:
    ordered = sorted(incarnations, key=lambda i: i.last_copy_ms or 0)
    return "; ".join(i.describe() for i in ordered)
