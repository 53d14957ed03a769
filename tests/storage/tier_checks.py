"""Checks on a remote tier shared by the storage tests: what is finished, what reads back, what is open."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import crc32c as reference_crc

from storage_core.adapters.store import RemoteStore
from storage_core.formats.record_batch import iter_batch_headers
from storage_core.logdir import LogDir
from storage_core.remote.catalog import PartitionCatalog, list_partitions, list_topics
from storage_core.remote.layout import RemoteLayout, SegmentObject, SegmentState
from storage_core.remote.reader import RemoteReader


def rolled_segments(log_dir: Path, topic: str, partition: int) -> list[int]:
    """Base offsets of a local partition's segments, the active one left out."""
    return [s.base_offset for s in LogDir(log_dir).partitions({topic})[partition].segments()][:-1]


def finished_segments_complete(
    store: RemoteStore, log_dir: Path, *, after_trim: bool = False
) -> dict[tuple[str, int], list[int]]:
    """Every COPY_FINISHED segment has all its objects at the recorded sizes, its .log the recorded batch
    chain, and its .log equals the local file; returns the finished base offsets per partition.

    ``after_trim``: a local trim ran, so Kafka deletes the segments below the new log start offset, on its
    own schedule (renamed ``.deleted`` first): a local file that is gone is no failure, and the remote
    .log is held to its recorded chain alone."""
    layout = RemoteLayout(store.root)
    finished: dict[tuple[str, int], list[int]] = {}
    for topic, topic_id in list_topics(store, layout):
        for tp in list_partitions(store, layout, topic, topic_id):
            catalog = PartitionCatalog(store, layout, tp)
            bases = []
            for entry in catalog.listing().segments.values():
                if entry.state is not SegmentState.COPY_FINISHED:
                    continue
                meta = catalog.read_marker(entry.base_offset, entry.segment_id, SegmentState.COPY_FINISHED)
                for obj, stored in meta.objects.items():
                    assert entry.objects.get(obj.value) == stored.size, f"{tp} {meta.base_offset} {obj}"
                local = log_dir / f"{topic}-{tp.partition}" / f"{meta.base_offset:020d}.log"
                remote = layout.object_key(tp, meta.base_offset, meta.segment_id, SegmentObject.LOG)
                tiered = store.get(remote)
                assert meta.objects[SegmentObject.LOG].batch_chain_crc32c == batch_chain(tiered)
                try:
                    assert tiered == local.read_bytes()
                except FileNotFoundError:
                    if not after_trim:
                        raise
                bases.append(meta.base_offset)
            finished[(topic, tp.partition)] = sorted(bases)
    return finished


def batch_chain(log: bytes) -> int:
    """The checksum a tiered .log records: CRC-32C over the first 21 bytes of each batch, in order."""
    starts = [position for position, _ in iter_batch_headers(io.BytesIO(log))]
    return reference_crc.crc32c(b"".join(log[p : p + 21] for p in starts))


def read_offsets(store: RemoteStore, topic: str, partition: int) -> list[int]:
    """Every offset the remote reader serves for the partition, in the order it serves them."""
    with RemoteReader(store) as reader:
        tp = reader.resolve(topic, partition)
        manifest = reader.manifest(tp, refresh=True)
        if manifest.start_offset is None:
            return []
        return [r.offset for r in reader.read_from_offset(tp, manifest.start_offset)]


def open_uploads(store: RemoteStore, under: str | None = None) -> list[dict[str, Any]]:
    """Unfinished multipart uploads in the store's bucket, or only those under the path ``under``."""
    bucket, _, prefix = (under or store.root).partition("/")
    kwargs = {"Prefix": prefix + "/"} if under else {}
    listing = store.fs.call_s3("list_multipart_uploads", Bucket=bucket, **kwargs)
    return list(listing.get("Uploads", []))
