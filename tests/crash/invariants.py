"""What must hold after any crash and a rerun: the checks of the crash trials, from the tier and from Kafka.

A ``Snapshot`` is what a user could read at one moment: every record the remote tier serves (offset ->
key and value) and Kafka's log start and high watermark per partition. ``check`` compares the snapshot
taken before a trial with the one after its rerun.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from storage.tier_checks import batch_chain

from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore
from storage_core.remote.catalog import PartitionCatalog, list_partitions, list_topics
from storage_core.remote.layout import RemoteLayout, SegmentObject, SegmentState
from storage_core.remote.reader import RemoteReader

Content = tuple[bytes | None, bytes | None]


@dataclass
class Snapshot:
    remote: dict[int, dict[int, Content]] = field(default_factory=dict)
    """partition -> offset -> (key, value), everything the remote tier serves."""
    log_start: dict[int, int] = field(default_factory=dict)
    high_watermark: dict[int, int] = field(default_factory=dict)

    def records(self) -> int:
        return sum(len(r) for r in self.remote.values())


def complete_segments(store: RemoteStore, topic: str) -> int:
    """Every COPY_FINISHED segment of ``topic`` has each object at its recorded size, and its .log the batch
    chain its marker records; returns how many finished segments there are."""
    layout = RemoteLayout(store.root)
    count = 0
    for name, topic_id in list_topics(store, layout):
        if name != topic:
            continue
        for tp in list_partitions(store, layout, name, topic_id):
            catalog = PartitionCatalog(store, layout, tp)
            for entry in catalog.listing().segments.values():
                if entry.state is not SegmentState.COPY_FINISHED:
                    continue
                meta = catalog.read_marker(entry.base_offset, entry.segment_id, SegmentState.COPY_FINISHED)
                for obj, stored in meta.objects.items():
                    assert entry.objects.get(obj.value) == stored.size, f"{tp} {meta.base_offset} {obj} size"
                log = store.get(layout.object_key(tp, meta.base_offset, meta.segment_id, SegmentObject.LOG))
                assert batch_chain(log) == meta.objects[SegmentObject.LOG].batch_chain_crc32c, (
                    f"{tp} {meta.base_offset}: the .log is not the one its marker vouches for"
                )
                count += 1
    return count


def snapshot(store: RemoteStore, bootstrap: str | None, topic: str, partitions: int) -> Snapshot:
    snap = Snapshot()
    store.invalidate()
    with RemoteReader(store) as reader:
        for p in range(partitions):
            records: dict[int, Content] = {}
            try:
                tp = reader.resolve(topic, p)
            except Exception:  # noqa: BLE001 - nothing tiered yet for this partition
                snap.remote[p] = records
                continue
            manifest = reader.manifest(tp, refresh=True)
            if manifest.start_offset is not None:
                for r in reader.read_from_offset(tp, manifest.start_offset):
                    assert r.offset not in records, f"offset {r.offset} served twice"
                    records[r.offset] = (r.key, r.value)
            snap.remote[p] = records
    if bootstrap is not None:
        admin = KafkaAdmin(bootstrap)
        tps = [(topic, p) for p in range(partitions)]
        snap.log_start = {p: o for (_, p), o in admin.log_start_offsets(tps).items()}
        snap.high_watermark = {p: o for (_, p), o in admin.high_watermarks(tps).items()}
    return snap


def check(before: Snapshot, after: Snapshot, *, may_expire: bool) -> int:
    """Assert the invariants between two snapshots; return the number of records compared."""
    compared = 0
    for p, now in after.remote.items():
        offsets = sorted(now)
        if offsets:
            assert offsets == list(range(offsets[0], offsets[-1] + 1)), f"partition {p}: a gap in the tier"
        start = offsets[0] if offsets else None
        for offset, content in before.remote.get(p, {}).items():
            compared += 1
            if offset in now:
                assert now[offset] == content, f"partition {p} offset {offset}: bytes changed"
            else:
                assert may_expire, f"partition {p} offset {offset}: was readable, is gone"
                assert start is None or offset < start, f"partition {p} offset {offset}: not a prefix"
        if after.log_start:
            end = offsets[-1] if offsets else None
            if end is None:
                assert after.log_start[p] == before.log_start.get(p, 0), f"partition {p}: trimmed untiered"
            else:
                assert after.log_start[p] <= end + 1, (
                    f"partition {p}: local log start {after.log_start[p]} above tiered end {end} + 1"
                )
    return compared
