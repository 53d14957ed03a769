"""Remote retention by time and by size, the orphan sweep, topic deletion and interrupted cleanups, on
data a real broker wrote and the real CLI tiered."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.tierkeeper_cli import run_cli
from storage_core.adapters.store import RemoteStore
from storage_core.faults import ENV
from storage_core.remote.catalog import PartitionCatalog, list_topics
from storage_core.remote.layout import RemoteLayout, SegmentObject, SegmentState
from storage_core.remote.metadata import SegmentMetadata
from storage_core.remote.reader import RemoteReader

from .conftest import TieredTopic


def _catalog(remote: Path, topic: str) -> PartitionCatalog:
    store = RemoteStore(f"file://{remote}")
    layout = RemoteLayout(store.root)
    ((name, topic_id),) = [t for t in list_topics(store, layout) if t[0] == topic]
    from storage_core.remote.layout import TopicPartitionId

    return PartitionCatalog(store, layout, TopicPartitionId(name, topic_id, 0))


def _assert_deleted(remote: Path, topic: str, gone: list[SegmentMetadata]) -> None:
    listing = _catalog(remote, topic).listing()
    for meta in gone:
        entry = listing.segments[meta.segment_id]
        assert entry.objects == {}, f"segment {meta.base_offset} still has data"
        assert entry.states == {SegmentState.DELETE_FINISHED}


def _read(remote: Path, topic: str, from_offset: int, *flags: str) -> subprocess.CompletedProcess[str]:
    """Run ``tierkeeper read`` on partition 0 of ``topic`` in the file tier ``remote`` from an offset."""
    return run_cli(
        "read",
        "--remote",
        f"file://{remote}",
        "--topic",
        topic,
        "--partition",
        "0",
        "--from-offset",
        str(from_offset),
        *flags,
    )


def _retention_between(segments: list[SegmentMetadata], keep_from: int) -> int:
    """A retention.ms that expires exactly segments[:keep_from]: the boundary halfway between the two
    segments' largest timestamps, measured from now."""
    boundary = (segments[keep_from - 1].max_timestamp + segments[keep_from].max_timestamp) // 2
    return int(time.time() * 1000) - boundary


def test_retention_by_time_deletes_exactly_the_expired_segments(
    tiered_topic: TieredTopic, tmp_path: Path
) -> None:
    remote = tiered_topic.fresh_remote(tmp_path / "remote")
    before = tiered_topic.segments(remote)
    keep_from = 3
    proc = run_cli(
        "cleanup",
        "--remote",
        f"file://{remote}",
        "--remote-retention-ms",
        str(_retention_between(before, keep_from)),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [d["base_offset"] for d in report["partitions"][0]["deleted"]] == [
        m.base_offset for m in before[:keep_from]
    ]
    assert all("older than remote retention" in d["reason"] for d in report["partitions"][0]["deleted"])
    after = tiered_topic.segments(remote)
    assert [m.segment_id for m in after] == [m.segment_id for m in before[keep_from:]]
    _assert_deleted(remote, tiered_topic.topic, before[:keep_from])

    below = _read(remote, tiered_topic.topic, before[0].base_offset)
    assert below.returncode == 1
    assert f"outside the remote tier [{after[0].base_offset}," in below.stderr
    assert "Traceback" not in below.stderr
    above = _read(remote, tiered_topic.topic, after[0].base_offset, "--max-records", "5")
    assert above.returncode == 0
    assert [json.loads(line)["offset"] for line in above.stdout.splitlines()] == list(
        range(after[0].base_offset, after[0].base_offset + 5)
    )


def test_retention_by_bytes_keeps_the_newest_that_fit(tiered_topic: TieredTopic, tmp_path: Path) -> None:
    remote = tiered_topic.fresh_remote(tmp_path / "remote")
    before = tiered_topic.segments(remote)
    keep = 4
    limit = sum(m.size_bytes for m in before[-keep:])
    proc = run_cli(
        "cleanup", "--remote", f"file://{remote}", "--remote-retention-bytes", str(limit), "--json"
    )
    assert proc.returncode == 0, proc.stderr
    after = tiered_topic.segments(remote)
    assert [m.segment_id for m in after] == [m.segment_id for m in before[-keep:]]
    _assert_deleted(remote, tiered_topic.topic, before[:-keep])
    # One byte less and one more segment has to go.
    proc = run_cli("cleanup", "--remote", f"file://{remote}", "--remote-retention-bytes", str(limit - 1))
    assert proc.returncode == 0
    assert [m.segment_id for m in tiered_topic.segments(remote)] == [
        m.segment_id for m in before[-keep + 1 :]
    ]


def test_dry_run_changes_nothing(tiered_topic: TieredTopic, tmp_path: Path) -> None:
    remote = tiered_topic.fresh_remote(tmp_path / "remote")
    files_before = sorted(p.relative_to(remote) for p in remote.rglob("*"))
    proc = run_cli("cleanup", "--remote", f"file://{remote}", "--remote-retention-bytes", "1", "--dry-run")
    assert proc.returncode == 0
    assert "would delete segment" in proc.stdout
    assert sorted(p.relative_to(remote) for p in remote.rglob("*")) == files_before


def test_orphan_sweep_removes_unfinished_attempts_and_never_finished_data(
    tiered_topic: TieredTopic, tmp_path: Path
) -> None:
    remote = tiered_topic.fresh_remote(tmp_path / "remote")
    catalog = _catalog(remote, tiered_topic.topic)
    finished = tiered_topic.segments(remote)
    # An abandoned copy attempt (COPY_STARTED + half its objects) and objects with no marker at all.
    abandoned = finished[-1].model_copy(
        update={"segment_id": uuid.uuid4(), "state": SegmentState.COPY_STARTED}
    )
    catalog.write_marker(abandoned)
    log_key = catalog.layout.object_key(
        catalog.tp, abandoned.base_offset, abandoned.segment_id, SegmentObject.LOG
    )
    catalog.store.put_chunks(log_key, [b"partial"])
    markerless = catalog.layout.object_key(catalog.tp, 999_999, uuid.uuid4(), SegmentObject.OFFSET_INDEX)
    catalog.store.put_chunks(markerless, [b"x" * 16])

    young = run_cli("cleanup", "--remote", f"file://{remote}", "--json")  # default grace: 6 h
    assert json.loads(young.stdout)["partitions"][0]["orphans_removed"] == 0
    assert catalog.store.exists(log_key)

    proc = run_cli("cleanup", "--remote", f"file://{remote}", "--orphan-grace-ms", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["partitions"][0]["orphans_removed"] == 2
    assert not catalog.store.exists(log_key) and not catalog.store.exists(markerless)
    assert abandoned.segment_id not in catalog.listing().segments
    after = tiered_topic.segments(remote)
    assert [m.segment_id for m in after] == [m.segment_id for m in finished]
    with RemoteReader(catalog.store) as reader:
        offsets = [r.offset for r in reader.read_from_offset(catalog.tp, 0)]
    assert offsets == list(range(finished[-1].end_offset + 1))


def test_duplicate_finished_copy_is_removed_through_delete_states(
    tiered_topic: TieredTopic, tmp_path: Path
) -> None:
    remote = tiered_topic.fresh_remote(tmp_path / "remote")
    catalog = _catalog(remote, tiered_topic.topic)
    original = tiered_topic.segments(remote)[2]
    twin_id = uuid.uuid4()
    for obj in original.objects:
        data = catalog.store.get(
            catalog.layout.object_key(catalog.tp, original.base_offset, original.segment_id, obj)
        )
        catalog.store.put_chunks(
            catalog.layout.object_key(catalog.tp, original.base_offset, twin_id, obj), [data]
        )
    twin = original.model_copy(update={"segment_id": twin_id, "event_time_ms": original.event_time_ms + 1})
    catalog.write_marker(twin.with_state(SegmentState.COPY_STARTED, twin.event_time_ms))
    catalog.write_marker(twin)
    proc = run_cli("cleanup", "--remote", f"file://{remote}", "--json")
    assert json.loads(proc.stdout)["partitions"][0]["duplicates_removed"] == 1
    assert catalog.listing().segments[twin_id].states == {SegmentState.DELETE_FINISHED}
    assert original.segment_id in {m.segment_id for m in tiered_topic.segments(remote)}


def test_delete_topic_removes_all_remote_data(tiered_topic: TieredTopic, tmp_path: Path) -> None:
    remote = tiered_topic.fresh_remote(tmp_path / "remote")
    proc = run_cli("cleanup", "--remote", f"file://{remote}", "--delete-topic", tiered_topic.topic, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["bytes_deleted"] > 0
    assert [p for p in remote.rglob("*") if p.is_file()] == []
    again = run_cli("cleanup", "--remote", f"file://{remote}", "--delete-topic", tiered_topic.topic)
    assert again.returncode == 1 and "is not in the remote tier" in again.stderr


def _kill_points(expired: int) -> list[str]:
    """Where the trials kill the cleanup (storage_core/faults.py): after the DELETE_STARTED markers,
    and after each expired segment's data delete and DELETE_FINISHED marker."""
    points = ["cleanup.delete.started"]
    for n in range(1, expired + 1):
        points += [f"cleanup.segment.data_deleted:{n}", f"cleanup.segment.deleted:{n}"]
    return points


@pytest.mark.slow
def test_killed_cleanup_converges(tiered_topic: TieredTopic, tmp_path: Path) -> None:
    before = tiered_topic.segments(tiered_topic.baseline)
    keep = 3
    limit = str(sum(m.size_bytes for m in before[-keep:]))
    points = _kill_points(len(before) - keep)
    for trial, point in enumerate(points):
        remote = tiered_topic.fresh_remote(tmp_path / f"remote-{trial}")
        argv = [
            sys.executable,
            "-m",
            "storage_core.cli",
            "cleanup",
            "--remote",
            f"file://{remote}",
            "--remote-retention-bytes",
            limit,
        ]
        killed = subprocess.run(
            argv, capture_output=True, text=True, env={**os.environ, ENV: point}, timeout=120
        )
        assert killed.returncode == -signal.SIGKILL, f"{point}: the kill must land ({killed.stderr})"
        catalog = _catalog(remote, tiered_topic.topic)
        states = [e.state for e in catalog.listing().segments.values()]
        if point != f"cleanup.segment.deleted:{len(before) - keep}":  # the last kill leaves none half done
            assert SegmentState.DELETE_STARTED in states, f"{point}: a deletion is left half done"
        # Whatever the kill left, what is readable is complete and contiguous.
        readable = tiered_topic.segments(remote)
        with RemoteReader(catalog.store) as reader:
            offsets = [r.offset for r in reader.read_from_offset(catalog.tp, readable[0].base_offset)]
        assert offsets == list(range(readable[0].base_offset, before[-1].end_offset + 1))
        rerun = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert rerun.returncode == 0, rerun.stderr
        assert [m.segment_id for m in tiered_topic.segments(remote)] == [m.segment_id for m in before[-keep:]]
        _assert_deleted(remote, tiered_topic.topic, before[:-keep])
