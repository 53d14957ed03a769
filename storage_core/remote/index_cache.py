"""Local cache of a remote segment's small immutable objects (remote indexes, txn index).

Objects are keyed by segment id, which is never reused, so a cached copy can never be stale; a cached
file whose size differs from the metadata is refetched. The cache is only an optimisation: without it
(or with it wiped) everything is read from the remote store again. Every object is checked against the size
and CRC-32C its COPY_FINISHED marker recorded, whether it comes from the store or the disk cache.
"""

from __future__ import annotations

import os
import uuid
from collections import OrderedDict
from pathlib import Path

from storage_core.errors import CorruptDataError
from storage_core.formats.crc import crc32c
from storage_core.remote.layout import RemoteLayout, SegmentObject
from storage_core.remote.metadata import SegmentMetadata, StoredObject
from storage_core.remote.store_api import ObjectStore

MEMORY_ENTRIES = 64


class IndexCache:
    def __init__(self, store: ObjectStore, layout: RemoteLayout, directory: Path | None) -> None:
        self.store = store
        self.layout = layout
        self.directory = directory
        self._memory: OrderedDict[tuple[uuid.UUID, SegmentObject], bytes] = OrderedDict()

    def peek(self, meta: SegmentMetadata, obj: SegmentObject) -> bytes | None:
        """The object if it is held in memory (b"" when the segment has none), else None: no I/O."""
        if obj not in meta.objects:
            return b""
        key = (meta.segment_id, obj)
        data = self._memory.get(key)
        if data is not None:
            self._memory.move_to_end(key)
        return data

    def get(self, meta: SegmentMetadata, obj: SegmentObject) -> bytes:
        stored = meta.objects.get(obj)
        if stored is None:
            return b""
        key = (meta.segment_id, obj)
        if key in self._memory:
            self._memory.move_to_end(key)
            return self._memory[key]
        data = self._read_disk(meta.segment_id, obj, stored.size)
        if data is not None and not _intact(data, stored):
            data = None  # a damaged cache file is fetched again, never trusted
        if data is None:
            key_name = self.layout.object_key(meta.tp, meta.base_offset, meta.segment_id, obj)
            data = self.store.get(key_name)
            if not _intact(data, stored):
                raise CorruptDataError(
                    f"{obj.value} object does not match its COPY_FINISHED marker ({_mismatch(data, stored)})",
                    topic=meta.tp.topic,
                    partition=meta.tp.partition,
                    offset=meta.base_offset,
                    path=key_name,
                )
            self._write_disk(meta.segment_id, obj, data)
        self._memory[key] = data
        while len(self._memory) > MEMORY_ENTRIES:
            self._memory.popitem(last=False)
        return data

    def _path(self, segment_id: uuid.UUID, obj: SegmentObject) -> Path | None:
        return None if self.directory is None else self.directory / f"{segment_id}.{obj.value}"

    def _read_disk(self, segment_id: uuid.UUID, obj: SegmentObject, size: int) -> bytes | None:
        path = self._path(segment_id, obj)
        if path is None or not path.is_file() or path.stat().st_size != size:
            return None
        return path.read_bytes()

    def _write_disk(self, segment_id: uuid.UUID, obj: SegmentObject, data: bytes) -> None:
        path = self._path(segment_id, obj)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)


def _intact(data: bytes, stored: StoredObject) -> bool:
    """The object as its marker recorded it: same size and, where the marker has one, same CRC-32C (the
    remote indexes' entries carry their own CRCs, but the pointer indexes and the txn index do not, and an
    entry rewritten whole with a fresh CRC would pass its own check)."""
    return len(data) == stored.size and (stored.crc32c is None or crc32c(data) == stored.crc32c)


def _mismatch(data: bytes, stored: StoredObject) -> str:
    if len(data) != stored.size:
        return f"{len(data)} bytes, marker says {stored.size}"
    return f"CRC-32C {crc32c(data):#010x}, marker says {stored.crc32c:#010x}"
