"""A remote tier written through the real store and catalog, with generated record batches as segments.

The restore path copies objects byte for byte and checks them against what was recorded at copy time: a
``.log``'s batch CRCs and batch chain, the whole-object CRC-32C of everything else. Random bytes serve for
the other objects, and for ``.log`` objects in the older metadata that recorded a whole-object CRC
(``legacy_log_crc``). Real Kafka segments are covered by the real-cluster tests.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from formats.formats_builders import Rec, build_batch

from storage_core.adapters.store import RemoteStore
from storage_core.formats.crc import crc32c
from storage_core.formats.record_batch import CRC_START
from storage_core.rebuild.plan import AssignedPartition
from storage_core.remote.catalog import PartitionCatalog
from storage_core.remote.layout import RemoteLayout, SegmentObject, SegmentState, TopicPartitionId
from storage_core.remote.metadata import SegmentMetadata, StoredObject

TOPIC = "payments"
TOPIC_ID = "q0nC4cY1Rk2H9b8hQ1XW3w"
BROKER = 3
_FILES = (
    (SegmentObject.LOG, ".log"),
    (SegmentObject.OFFSET_INDEX, ".index"),
    (SegmentObject.TIME_INDEX, ".timeindex"),
    (SegmentObject.PRODUCER_SNAPSHOT, ".snapshot"),
)


@dataclass
class SyntheticTier:
    store: RemoteStore
    partitions: int
    segments: dict[int, list[SegmentMetadata]] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    tail: int = 17

    def key(self, meta: SegmentMetadata, obj: SegmentObject) -> str:
        return RemoteLayout(self.store.root).object_key(meta.tp, meta.base_offset, meta.segment_id, obj)

    def cluster(self) -> list[AssignedPartition]:
        return [
            AssignedPartition(TOPIC, p, TOPIC_ID, 1, (1, 2, BROKER), 0, segs[-1].next_offset + self.tail, {})
            for p, segs in self.segments.items()
        ]

    def expected_files(self, partition: int) -> dict[str, bytes]:
        """Every file a rebuild with no window restores for ``partition`` (snapshot: none before offset 0)."""
        out: dict[str, bytes] = {}
        for meta in self.segments[partition]:
            for obj, ext in _FILES[:3]:
                out[f"{meta.base_offset:020d}{ext}"] = self.blobs[self.key(meta, obj)]
        return out


def log_object(rng: random.Random, size: int, first_offset: int) -> tuple[bytes, int, int]:
    """Single-record batches of random values filling at least ``size`` bytes, from ``first_offset`` on:
    returns the bytes, the record count and the batch chain CRC-32C (computed here from the batch bounds)."""
    batches: list[bytes] = []
    while sum(map(len, batches)) < size:
        value = rng.randbytes(rng.randint(100, 64 << 10))
        batches.append(
            build_batch(
                [Rec(0, 1_000 + len(batches), b"k", value)],
                base_offset=first_offset + len(batches),
                leader_epoch=1,
            )
        )
    return b"".join(batches), len(batches), crc32c(b"".join(b[:CRC_START] for b in batches))


def write_tier(
    root: Path,
    *,
    partitions: int = 2,
    segments: int = 6,
    seed: int = 405,
    big_segment: int | None = None,
    legacy_log_crc: bool = False,
) -> SyntheticTier:
    """COPY_FINISHED segments with markers, as the copier leaves them; ``big_segment`` bytes for the last
    log of partition 0 (to cross the download chunk size)."""
    rng = random.Random(seed)
    tier = SyntheticTier(RemoteStore(f"file://{root}"), partitions)
    layout = RemoteLayout(tier.store.root)
    for p in range(partitions):
        tp = TopicPartitionId(TOPIC, TOPIC_ID, p)
        catalog = PartitionCatalog(tier.store, layout, tp)
        offset = 0
        metas = []
        for i in range(segments):
            size = big_segment if big_segment and p == 0 and i == segments - 1 else rng.randint(200, 6000)
            if legacy_log_crc:
                log, records = rng.randbytes(size), rng.randint(5, 40)
                stored_log = StoredObject(size=size, crc32c=crc32c(log))
            else:
                log, records, chain = log_object(rng, size, offset)
                stored_log = StoredObject(size=len(log), batch_chain_crc32c=chain)
            meta = SegmentMetadata(
                topic=TOPIC,
                topic_id=TOPIC_ID,
                partition=p,
                segment_id=uuid.UUID(int=rng.getrandbits(128)),
                base_offset=offset,
                end_offset=offset + records - 1,
                next_offset=offset + records,
                max_timestamp=1_000 * i,
                size_bytes=len(log),
                leader_epochs=[(0, 0), (1, offset)],
                state=SegmentState.COPY_FINISHED,
            )
            objects = {}
            for obj, _ in _FILES:
                data = log if obj is SegmentObject.LOG else rng.randbytes(rng.randint(0, 300))
                key = tier.key(meta, obj)
                tier.store.put_chunks(key, [data])
                tier.blobs[key] = data
                objects[obj] = (
                    stored_log
                    if obj is SegmentObject.LOG
                    else StoredObject(size=len(data), crc32c=crc32c(data))
                )
            meta = meta.model_copy(update={"objects": objects})
            catalog.write_marker(meta.with_state(SegmentState.COPY_STARTED, 1))
            catalog.write_marker(meta)
            metas.append(meta)
            offset += records
        tier.segments[p] = metas
    return tier


def format_log_dir(path: Path, node_id: int = BROKER) -> bytes:
    """A log dir as kafka-storage format leaves it; returns the meta.properties bytes."""
    path.mkdir(parents=True, exist_ok=True)
    meta = (
        "#\n#Thu Nov 20 10:00:00 UTC "
        f"2025\nnode.id={node_id}\ndirectory.id=Xm2tXo9jS0aXq3vJ9uC7BQ\nversion=1\n"
        "cluster.id=7x2hHk5DTlqdNf6mPq0Ang\n"
    ).encode()
    (path / "meta.properties").write_bytes(meta)
    return meta


def tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (relative name -> bytes)."""
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}
