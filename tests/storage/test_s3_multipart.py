"""Segment uploads to S3 (moto): parts travel concurrently, objects are byte-identical, failures abort.

These drive ``RemoteStore.put_chunks`` - the call the copy path streams every CRC-checked segment through -
against the moto server, and watch the S3 calls s3fs makes on our behalf.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from storage_core.adapters import s3_upload
from storage_core.adapters.store import RemoteStore
from storage_core.errors import CorruptDataError, RemoteStoreError

from .tier_checks import open_uploads

MiB = 1 << 20


class CallWatch:
    """Wraps an s3fs instance's ``_call_s3``: counts calls per method and the most parts ever in flight."""

    def __init__(
        self,
        fs: Any,
        monkeypatch: pytest.MonkeyPatch,
        *,
        part_delay: float = 0.0,
        fail_part: int | None = None,
    ) -> None:
        self.calls: Counter[str] = Counter()
        self.in_flight = self.max_in_flight = 0
        original = fs._call_s3

        async def watched(method: str, *args: Any, **kwargs: Any) -> Any:
            self.calls[method] += 1
            if method != "upload_part":
                return await original(method, *args, **kwargs)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await asyncio.sleep(part_delay)  # a slow link, so overlapping parts are observable
                if kwargs["PartNumber"] == fail_part:
                    raise ConnectionResetError(f"injected failure of part {fail_part}")
                return await original(method, *args, **kwargs)
            finally:
                self.in_flight -= 1

        monkeypatch.setattr(fs, "_call_s3", watched)


def _chunks(data: bytes, sizes: Iterator[int]) -> Iterator[bytes]:
    pos = 0
    while pos < len(data):
        size = next(sizes)
        yield data[pos : pos + size]
        pos += size


def _store(s3_bucket: tuple[str, dict[str, Any]]) -> RemoteStore:
    url, options = s3_bucket
    store = RemoteStore(f"{url}/tier", options)
    assert store.is_s3
    return store


def test_large_object_is_a_concurrent_multipart_upload(
    s3_bucket: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(s3_bucket)
    watch = CallWatch(store.fs, monkeypatch, part_delay=0.2)
    data = os.urandom(29 * MiB + 12_345)  # 3 full 8 MiB parts and a short last one
    rng = random.Random(7)
    key = f"{store.root}/t-x/0/00000000000000000000-a.log"

    written = store.put_chunks(key, _chunks(data, iter(lambda: rng.randint(1, 3 * MiB), None)))

    assert written == len(data)
    assert store.get(key) == data
    assert store.fs.info(key)["ETag"].strip('"').endswith("-4"), "expected a 4-part multipart object"
    assert watch.calls["upload_part"] == 4
    assert watch.calls["create_multipart_upload"] == 1 and watch.calls["complete_multipart_upload"] == 1
    assert 1 < watch.max_in_flight <= s3_upload.MAX_IN_FLIGHT
    assert open_uploads(store) == []


def test_object_below_one_part_is_a_single_put(
    s3_bucket: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(s3_bucket)
    watch = CallWatch(store.fs, monkeypatch)
    data = os.urandom(3 * MiB)
    key = f"{store.root}/small.log"

    assert store.put_chunks(key, _chunks(data, iter(lambda: MiB, None))) == len(data)

    assert store.get(key) == data
    assert "-" not in store.fs.info(key)["ETag"]
    assert watch.calls["put_object"] == 1
    assert watch.calls["create_multipart_upload"] == watch.calls["upload_part"] == 0


def test_empty_object_is_written(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    store = _store(s3_bucket)
    key = f"{store.root}/empty.txnindex"
    assert store.put_chunks(key, iter([])) == 0
    assert store.get(key) == b""


def test_corrupt_source_aborts_the_upload_and_leaves_nothing(
    s3_bucket: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(s3_bucket)
    watch = CallWatch(store.fs, monkeypatch, part_delay=0.1)
    key = f"{store.root}/t-x/0/00000000000000000000-b.log"

    def source() -> Iterator[bytes]:
        for _ in range(20):  # two full parts are on their way before the damage is found
            yield os.urandom(MiB)
        raise CorruptDataError("batch CRC mismatch", topic="t", partition=0, offset=1234)

    with pytest.raises(CorruptDataError, match="offset=1234"):
        store.put_chunks(key, source())

    assert watch.calls["upload_part"] == 2 and watch.calls["abort_multipart_upload"] == 1
    assert watch.calls["complete_multipart_upload"] == 0
    assert open_uploads(store) == []
    assert not store.exists(key)


def test_failed_part_aborts_the_upload_with_the_key_in_the_error(
    s3_bucket: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(s3_bucket)
    watch = CallWatch(store.fs, monkeypatch, fail_part=2)
    key = f"{store.root}/t-x/0/00000000000000000000-c.log"

    with pytest.raises(RemoteStoreError, match=r"upload .*00000000000000000000-c\.log.*part 2"):
        store.put_chunks(key, _chunks(os.urandom(40 * MiB), iter(lambda: MiB, None)))

    assert watch.calls["abort_multipart_upload"] == 1
    assert watch.calls["complete_multipart_upload"] == 0
    assert open_uploads(store) == []
    assert not store.exists(key)


def test_part_size_below_the_s3_minimum_is_refused(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    store = _store(s3_bucket)
    with pytest.raises(ValueError, match="5 MiB minimum"):
        s3_upload.upload_chunks(store.fs, f"{store.root}/x", [b"x"], part_size=MiB)


_KILLED_COPY = """
import json, sys, time, uuid
from storage_core.adapters.store import RemoteStore
from storage_core.remote.catalog import PartitionCatalog
from storage_core.remote.layout import RemoteLayout, SegmentObject, SegmentState, TopicPartitionId
from storage_core.remote.metadata import SegmentMetadata

url, options = sys.argv[1], json.loads(sys.argv[2])
store = RemoteStore(url, options)
layout = RemoteLayout(store.root)
tp = TopicPartitionId("orders", "q0nC4cY1Rk2H9b8hQ1XW3w", 0)
meta = SegmentMetadata(topic=tp.topic, topic_id=tp.topic_id, partition=0, segment_id=uuid.uuid4(),
                       base_offset=0, end_offset=99, next_offset=100, max_timestamp=0, size_bytes=1 << 30,
                       leader_epochs=[(0, 0)], state=SegmentState.COPY_STARTED)
PartitionCatalog(store, layout, tp).write_marker(meta)

def endless():
    while True:  # a segment being read and CRC-checked, slower than the upload
        yield bytes(1 << 20)
        time.sleep(0.02)

store.put_chunks(layout.object_key(tp, 0, meta.segment_id, SegmentObject.LOG), endless())
"""


def test_upload_of_a_killed_copy_is_aborted_by_cleanup_after_the_grace_period(
    s3_bucket: tuple[str, dict[str, Any]],
) -> None:
    import json
    import signal
    import subprocess
    import sys
    import time

    from storage_core.jobs.cleanup import CleanupOptions, run_cleanup

    url, options = s3_bucket
    store = RemoteStore(f"{url}/tier", options)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    copier = subprocess.Popen(
        [sys.executable, "-c", _KILLED_COPY, store.url, json.dumps(options)], env=env, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while not _uploaded_parts(store):
            assert copier.poll() is None, copier.stderr.read().decode() if copier.stderr else ""
            assert time.monotonic() < deadline, "the copier never got a part uploaded"
            time.sleep(0.1)
    finally:
        copier.send_signal(signal.SIGKILL)
        copier.wait()
    assert len(open_uploads(store)) == 1

    # moto stamps every upload "Initiated 2010-11-10T20:48:33Z" (real S3 gives the real time), so the
    # grace period is exercised by placing "now" relative to that stamp.
    initiated = int(open_uploads(store)[0]["Initiated"].timestamp() * 1000)
    young = run_cleanup(store, CleanupOptions(orphan_grace_ms=3600_000, now_ms=initiated + 1800_000))
    assert young["stale_uploads_aborted"] == [] and len(open_uploads(store)) == 1, "a running copy's upload"

    later = max(int(time.time() * 1000), initiated) + 2 * 3600_000
    preview = run_cleanup(store, CleanupOptions(orphan_grace_ms=3600_000, now_ms=later, dry_run=True))
    assert len(preview["stale_uploads_aborted"]) == 1 and len(open_uploads(store)) == 1

    swept = run_cleanup(store, CleanupOptions(orphan_grace_ms=3600_000, now_ms=later))
    assert swept["stale_uploads_aborted"] == preview["stale_uploads_aborted"]
    assert swept["stale_uploads_aborted"][0].endswith(".log")
    assert swept["partitions"][0]["orphans_removed"] == 1  # its COPY_STARTED marker
    assert open_uploads(store) == []
    assert swept["errors"] == []


def _uploaded_parts(store: RemoteStore) -> int:
    bucket = store.root.split("/")[0]
    total = 0
    for upload in open_uploads(store):
        parts = store.fs.call_s3("list_parts", Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        total += len(parts.get("Parts", []))
    return total


def test_deleting_a_topics_tier_aborts_its_open_uploads(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    import uuid

    from storage_core.jobs.cleanup import delete_topic
    from storage_core.remote.catalog import PartitionCatalog
    from storage_core.remote.layout import RemoteLayout, SegmentObject, SegmentState, TopicPartitionId
    from storage_core.remote.metadata import SegmentMetadata

    store = _store(s3_bucket)
    layout = RemoteLayout(store.root)
    tp = TopicPartitionId("orders", "q0nC4cY1Rk2H9b8hQ1XW3w", 0)
    meta = SegmentMetadata(
        topic=tp.topic,
        topic_id=tp.topic_id,
        partition=0,
        segment_id=uuid.uuid4(),
        base_offset=0,
        end_offset=9,
        next_offset=10,
        max_timestamp=0,
        size_bytes=1 << 30,
        leader_epochs=[(0, 0)],
        state=SegmentState.COPY_STARTED,
    )
    PartitionCatalog(store, layout, tp).write_marker(meta)
    bucket, key, _ = store.fs.split_path(layout.object_key(tp, 0, meta.segment_id, SegmentObject.LOG))
    upload = store.fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)
    store.fs.call_s3(
        "upload_part", Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=bytes(5 << 20)
    )

    preview = delete_topic(store, "orders", dry_run=True)
    assert preview["deleted_topics"][0]["uploads_aborted"] == [f"{bucket}/{key}"]
    assert len(open_uploads(store)) == 1

    report = delete_topic(store, "orders")
    assert report["deleted_topics"][0]["uploads_aborted"] == [f"{bucket}/{key}"]
    assert open_uploads(store) == []
    assert store.fs.find(store.root) == []
