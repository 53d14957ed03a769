"""Local cache of a remote segment's small immutable objects (remote indexes, txn index).

Objects are keyed by segment id, which is never reused, so a cached copy can never be stale; a cached
file whose size differs from the metadata is refetched. The cache is only an optimisation: without it
(or with it wiped) everything is read from the remote store again.
"""

from __future__ import annotations

import os
import uuid
from collections import OrderedDict
from pathlib import Path

from storage_core.remote.layout import RemoteLayout, SegmentObject
from storage_core.remote.metadata import SegmentMetadata
from storage_core.remote.store_api import ObjectStore

MEMORY_ENTRIES = 64


class IndexCache:
    def __init__(self, store: ObjectStore, layout: RemoteLayout, directory: Path | None) -> None:
        self.store = store
        self.layout = layout
        self.directory = directory
        self._memory: OrderedDict[tuple[uuid.UUID, SegmentObject], bytes] = OrderedDict()

    def get(self, meta: SegmentMetadata, obj: SegmentObject) -> bytes:
        stored = meta.objects.get(obj)
        if stored is None:
            return b""
        key = (meta.segment_id, obj)
        if key in self._memory:
            self._memory.move_to_end(key)
            return self._memory[key]
        data = self._read_disk(meta.segment_id, obj, stored.size)
        if data is None:
            data = self.store.get(self.layout.object_key(meta.tp, meta.base_offset, meta.segment_id, obj))
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
