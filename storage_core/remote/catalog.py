"""What the remote tier holds for a partition: markers, their states, and the manifest derived from them.

One LIST of the partition's directory tells every segment's state (it is in the marker names); marker
bodies are fetched only for finished segments the manifest does not list yet.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from pydantic import ValidationError

from storage_core.errors import CorruptDataError, RemoteObjectNotFound
from storage_core.remote.layout import (
    MANIFEST_NAME,
    PARTITION_STATE_NAME,
    STATE_ORDER,
    RemoteLayout,
    SegmentState,
    TopicPartitionId,
    marker_state,
    parse_object_name,
    parse_topic_dir,
)
from storage_core.remote.metadata import Manifest, PartitionState, SegmentMetadata, TrimHoldState
from storage_core.remote.store_api import ObjectStore


@dataclass
class SegmentListing:
    """What one LIST says about one segment id."""

    base_offset: int
    segment_id: uuid.UUID
    states: set[SegmentState] = field(default_factory=set)
    objects: dict[str, int] = field(default_factory=dict)
    """Non-marker objects: extension -> size."""

    @property
    def state(self) -> SegmentState | None:
        return max(self.states, key=STATE_ORDER.__getitem__) if self.states else None


@dataclass
class PartitionListing:
    segments: dict[uuid.UUID, SegmentListing]
    strays: list[str]
    """Keys in the partition directory that are neither segment objects nor the manifest."""


class PartitionCatalog:
    """Reads and writes the metadata of one remote partition."""

    def __init__(self, store: ObjectStore, layout: RemoteLayout, tp: TopicPartitionId) -> None:
        self.store = store
        self.layout = layout
        self.tp = tp

    def listing(self) -> PartitionListing:
        segments: dict[uuid.UUID, SegmentListing] = {}
        strays: list[str] = []
        for key, size in self.store.list_dir(self.layout.partition_dir(self.tp)):
            name = key.rsplit("/", 1)[-1]
            parsed = parse_object_name(name)
            if parsed is None:
                if name not in (MANIFEST_NAME, PARTITION_STATE_NAME):
                    strays.append(key)
                continue
            entry = segments.setdefault(
                parsed.segment_id, SegmentListing(parsed.base_offset, parsed.segment_id)
            )
            state = marker_state(parsed.ext)
            if state is not None:
                entry.states.add(state)
            else:
                entry.objects[parsed.ext] = size
        return PartitionListing(segments, strays)

    def read_marker(self, base_offset: int, segment_id: uuid.UUID, state: SegmentState) -> SegmentMetadata:
        key = self.layout.marker_key(self.tp, base_offset, segment_id, state)
        data = self.store.get(key)
        try:
            meta = SegmentMetadata.model_validate_json(data)
        except ValidationError as exc:
            raise CorruptDataError(
                f"unreadable segment metadata: {exc.errors()[0]['msg']}",
                topic=self.tp.topic,
                partition=self.tp.partition,
                offset=base_offset,
                path=key,
            ) from exc
        if meta.segment_id != segment_id or meta.state is not state:
            raise CorruptDataError(
                "segment metadata does not match its key",
                topic=self.tp.topic,
                partition=self.tp.partition,
                offset=base_offset,
                path=key,
            )
        return meta

    def write_marker(self, meta: SegmentMetadata) -> None:
        key = self.layout.marker_key(meta.tp, meta.base_offset, meta.segment_id, meta.state)
        self.store.put_atomic(key, meta.model_dump_json().encode())

    def segment_keys(self, entry: SegmentListing) -> tuple[list[str], list[str]]:
        """(data object keys, marker keys) of a listed segment."""
        stem = self.layout.segment_stem(self.tp, entry.base_offset, entry.segment_id)
        markers = [
            self.layout.marker_key(self.tp, entry.base_offset, entry.segment_id, s) for s in entry.states
        ]
        return [f"{stem}.{ext}" for ext in entry.objects], markers

    def read_state(self) -> PartitionState:
        try:
            return PartitionState.model_validate_json(
                self.store.get(self.layout.partition_state_key(self.tp))
            )
        except RemoteObjectNotFound:
            return PartitionState()
        except ValidationError as exc:
            raise CorruptDataError(
                f"unreadable partition state: {exc.errors()[0]['msg']}",
                topic=self.tp.topic,
                partition=self.tp.partition,
                path=self.layout.partition_state_key(self.tp),
            ) from exc

    def write_state(self, state: PartitionState) -> None:
        self.store.put_atomic(self.layout.partition_state_key(self.tp), state.model_dump_json().encode())

    def read_manifest(self) -> Manifest | None:
        """The stored manifest, or None when it is missing or unreadable (then it is rebuilt)."""
        try:
            data = self.store.get(self.layout.manifest_key(self.tp))
        except RemoteObjectNotFound:
            return None
        try:
            return Manifest.model_validate_json(data)
        except ValidationError:
            return None

    def rebuild_manifest(
        self, listing: PartitionListing | None = None, *, write: bool = True, strict: bool = False
    ) -> Manifest:
        """Derive the manifest from the markers (reusing stored entries that are still finished).

        A finished segment whose marker is unreadable is left out, unless ``strict``: then its
        ``CorruptDataError`` (naming the marker) is raised. Readers pass ``strict``: leaving the segment
        out would show them a hole, or a tier that begins later, with no word of why; copy and cleanup
        go on without it (the orphan sweep and ``scrub`` report it)."""
        listing = listing or self.listing()
        known = {m.segment_id: m for m in (self.read_manifest() or _empty(self.tp)).finished()}
        finished: list[SegmentMetadata] = []
        for entry in listing.segments.values():
            if entry.state is not SegmentState.COPY_FINISHED:
                continue
            meta = known.get(entry.segment_id)
            if meta is None:
                try:
                    meta = self.read_marker(entry.base_offset, entry.segment_id, SegmentState.COPY_FINISHED)
                except CorruptDataError:
                    if strict:
                        raise
                    continue  # an unreadable marker is not trusted
            finished.append(meta)
        manifest = Manifest.of(self.tp, finished)
        if write:
            self.store.put_atomic(self.layout.manifest_key(self.tp), manifest.model_dump_json().encode())
        return manifest

    def manifest(self) -> Manifest:
        """The stored manifest, rebuilt from the markers when it is missing or unreadable."""
        return self.read_manifest() or self.rebuild_manifest()


def _empty(tp: TopicPartitionId) -> Manifest:
    return Manifest(topic=tp.topic, topic_id=tp.topic_id, partition=tp.partition)


def read_trim_hold_state(
    store: ObjectStore, layout: RemoteLayout, topic: str, topic_id: str
) -> TrimHoldState:
    """The topic incarnation's trim-hold memory (empty when none was written yet). An unreadable one is a
    ``CorruptDataError``: starting over could release a group that should hold (``retention.trim_hold``)."""
    key = layout.trim_hold_state_key(topic, topic_id)
    try:
        return TrimHoldState.model_validate_json(store.get(key))
    except RemoteObjectNotFound:
        return TrimHoldState()
    except ValidationError as exc:
        raise CorruptDataError(
            f"unreadable trim-hold state: {exc.errors()[0]['msg']} (deleting it starts over: empty groups "
            "then hold again for trimHold.inactiveGroupMs)",
            topic=topic,
            path=key,
        ) from exc


def write_trim_hold_state(
    store: ObjectStore, layout: RemoteLayout, topic: str, topic_id: str, state: TrimHoldState
) -> None:
    """Replace the topic incarnation's trim-hold memory in one atomic put, as the partition state is."""
    store.put_atomic(layout.trim_hold_state_key(topic, topic_id), state.model_dump_json().encode())


def list_topics(store: ObjectStore, layout: RemoteLayout) -> list[tuple[str, str]]:
    """(topic, topic id) of every topic incarnation present in the remote tier."""
    out = []
    for path in store.list_subdirs(layout.root.rstrip("/") or ""):
        parsed = parse_topic_dir(path)
        if parsed is not None:
            out.append(parsed)
    return sorted(out)


def list_partitions(
    store: ObjectStore, layout: RemoteLayout, topic: str, topic_id: str
) -> list[TopicPartitionId]:
    out = []
    for path in store.list_subdirs(layout.topic_dir(topic, topic_id)):
        name = path.rsplit("/", 1)[-1]
        if name.isdigit():
            out.append(TopicPartitionId(topic, topic_id, int(name)))
    return sorted(out, key=lambda tp: tp.partition)
