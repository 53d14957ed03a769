"""Scrubbing: re-verify every finished segment's objects against what their COPY_FINISHED marker
recorded when they were written: each object's size, the CRC-32C of small objects, and the ``.log``
object's batch chain (every batch's own CRC-32C on the way; formats/batch_chain.py). The marker itself
is read too: one that no longer parses is damage, even while the manifest still serves its segment.

Reads every byte of the partition once (``.log`` objects in ranged reads of ``CHUNK`` bytes, so memory
stays flat). Damage is reported, never repaired here: what to do about a damaged segment (re-copy it
from a broker that still holds it, or restore from elsewhere) is an operator's decision.

Taking damaged segments out of the serving path (``scrub --quarantine``) is retention/quarantine.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.errors import CorruptDataError, RemoteObjectNotFound
from storage_core.formats.batch_chain import BatchChainCheck
from storage_core.formats.crc import crc32c
from storage_core.remote.catalog import PartitionCatalog
from storage_core.remote.layout import RemoteLayout, SegmentObject, SegmentState, TopicPartitionId
from storage_core.remote.metadata import SegmentMetadata
from storage_core.remote.store_api import ObjectStore

CHUNK = 8 << 20


@dataclass(frozen=True)
class Damage:
    """One object that no longer matches its recorded size or checksum."""

    topic: str
    partition: int
    base_offset: int
    segment_id: str
    key: str
    problem: str


@dataclass(frozen=True)
class ScrubResult:
    topic: str
    partition: int
    segments: int
    objects: int
    bytes_read: int
    damage: tuple[Damage, ...]
    quarantined: tuple[str, ...] = ()
    """Ids of the partition's segments in quarantine after this run (this run's and earlier ones)."""


def _check_object(
    store: ObjectStore, key: str, obj: SegmentObject, meta: SegmentMetadata
) -> tuple[int, str | None]:
    """(bytes read, problem or None) for one object."""
    stored = meta.objects[obj]
    try:
        size = store.size(key)
    except RemoteObjectNotFound:
        return 0, "missing"
    if size != stored.size:
        return 0, f"{size} bytes, but {stored.size} were recorded"
    if obj is SegmentObject.LOG and stored.batch_chain_crc32c is not None:
        check = BatchChainCheck(path=key)
        try:
            for start in range(0, size, CHUNK):
                check.feed(store.get_range(key, start, min(size, start + CHUNK)))
            check.finish(stored.batch_chain_crc32c)
        except CorruptDataError as exc:
            return size, str(exc)
        return size, None
    if stored.crc32c is not None:
        actual = crc32c(store.get(key))
        if actual != stored.crc32c:
            return size, f"CRC-32C {actual:#010x} differs from the recorded {stored.crc32c:#010x}"
        return size, None
    return 0, None


def scrub_partition(store: ObjectStore, tp: TopicPartitionId) -> ScrubResult:
    """Verify every finished segment of one partition (serving or shadowed); the result also names the
    segments already in quarantine (retention/quarantine.py), which are not verified again."""
    layout = RemoteLayout(store.root)
    catalog = PartitionCatalog(store, layout, tp)
    listing = catalog.listing()
    manifest = catalog.rebuild_manifest(listing, write=False)
    damage: list[Damage] = []
    objects = read = 0
    for entry in listing.segments.values():
        if entry.state is not SegmentState.COPY_FINISHED:
            continue
        try:
            catalog.read_marker(entry.base_offset, entry.segment_id, SegmentState.COPY_FINISHED)
        except CorruptDataError as exc:
            key = layout.marker_key(tp, entry.base_offset, entry.segment_id, SegmentState.COPY_FINISHED)
            damage.append(
                Damage(tp.topic, tp.partition, entry.base_offset, str(entry.segment_id), key, str(exc))
            )
    segments = manifest.finished()
    for meta in segments:
        for obj in meta.objects:
            key = layout.object_key(tp, meta.base_offset, meta.segment_id, obj)
            n, problem = _check_object(store, key, obj, meta)
            objects += 1
            read += n
            if problem is not None:
                damage.append(
                    Damage(tp.topic, tp.partition, meta.base_offset, str(meta.segment_id), key, problem)
                )
    held = {str(e.segment_id) for e in listing.segments.values() if e.state is SegmentState.QUARANTINED}
    return ScrubResult(
        tp.topic, tp.partition, len(segments), objects, read, tuple(damage), tuple(sorted(held))
    )
