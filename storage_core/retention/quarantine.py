"""Quarantine: take damaged segments (found by remote/scrub.py) out of the serving path, deleting nothing.

Per damaged segment a QUARANTINED marker (the metadata of its COPY_FINISHED marker plus the problem
found), then the partition's stored manifest is rewritten from the markers; from then on no reader
serves it. Crash-safe because the markers are the truth: whatever rebuilds the manifest from the markers
(the Spark DataSource's planning, copy, cleanup, scrub, ``RemoteReader.manifest(refresh=True)``) leaves
the segment out as soon as its marker exists, and a stored manifest that still lists it (a crash between
the two steps; record-level reads use it until then) is rewritten by the next ``scrub --quarantine`` (or
the next copy that finishes a segment).
A quarantined segment is never deleted by retention, duplicate removal or the orphan sweep (only by
deleting the whole topic's tier), and the local trim never passes it (retention/local_trim.py), so a
broker that still holds those offsets keeps them.

Release (the undo): delete the QUARANTINED marker, then rewrite the manifest; the segment is
COPY_FINISHED again and served as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage_core.errors import ConfigError
from storage_core.faults import fault_point
from storage_core.remote.catalog import PartitionCatalog
from storage_core.remote.layout import RemoteLayout, SegmentState, TopicPartitionId
from storage_core.remote.metadata import SegmentMetadata
from storage_core.remote.scrub import Damage
from storage_core.remote.store_api import ObjectStore


def quarantine(store: ObjectStore, tp: TopicPartitionId, damage: Sequence[Damage], now_ms: int) -> set[str]:
    """Quarantine the segments ``damage`` names (finished segments of ``tp``); returns their ids. Also
    rewrites a stored manifest that still lists a quarantined segment (a crashed earlier run)."""
    catalog = PartitionCatalog(store, RemoteLayout(store.root), tp)
    problems: dict[str, list[str]] = {}
    for d in damage:
        problems.setdefault(d.segment_id, []).append(f"{d.key}: {d.problem}")
    listing = catalog.listing()
    for segment_id, found in sorted(problems.items()):
        entry = next(e for e in listing.segments.values() if str(e.segment_id) == segment_id)
        meta = catalog.read_marker(entry.base_offset, entry.segment_id, SegmentState.COPY_FINISHED)
        catalog.write_marker(meta.with_state(SegmentState.QUARANTINED, now_ms, problem="; ".join(found)))
    if problems:
        fault_point("scrub.quarantine.marked")
        listing = catalog.listing()
    held = {e.segment_id for e in listing.segments.values() if e.state is SegmentState.QUARANTINED}
    stored = catalog.read_manifest()
    if problems or (stored is not None and any(m.segment_id in held for m in stored.finished())):
        catalog.rebuild_manifest(listing, write=True)
    return set(problems)


def release(store: ObjectStore, tp: TopicPartitionId, segment_id: str) -> SegmentMetadata:
    """Serve a quarantined segment again: delete its QUARANTINED marker, then rewrite the manifest.
    Returns the marker's metadata (what scrub had found)."""
    layout = RemoteLayout(store.root)
    catalog = PartitionCatalog(store, layout, tp)
    entry = next((e for e in catalog.listing().segments.values() if str(e.segment_id) == segment_id), None)
    if entry is None or SegmentState.QUARANTINED not in entry.states:
        raise ConfigError(f"{tp}: segment {segment_id} is not in quarantine")
    meta = catalog.read_marker(entry.base_offset, entry.segment_id, SegmentState.QUARANTINED)
    store.delete([layout.marker_key(tp, entry.base_offset, entry.segment_id, SegmentState.QUARANTINED)])
    catalog.rebuild_manifest(write=True)
    return meta
