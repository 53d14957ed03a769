"""``tierkeeper scrub --quarantine`` takes a damaged segment out of the serving path through the remote
metadata (a QUARANTINED marker, the manifest rewritten), deletes nothing, survives a crash between the
two steps, and ``--release`` undoes it. On file:// and moto s3://, with a corrupted ``.log`` object
planted by the test in the middle of a partition tiered from a real broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from storage.dataset import Dataset

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.store import RemoteStore
from storage_core.errors import CorruptDataError
from storage_core.faults import ENV
from storage_core.remote.catalog import PartitionCatalog
from storage_core.remote.layout import RemoteLayout, SegmentObject, SegmentState, TopicPartitionId
from storage_core.remote.metadata import SegmentMetadata
from storage_core.remote.reader import RemoteReader

from .conftest import Tier, copy_to


@dataclass
class Planted:
    tier: Tier
    tp: TopicPartitionId
    victim: SegmentMetadata
    log_key: str
    original: bytes
    reference: list[tuple[int, bytes | None]]
    """(offset, value) of every record of the partition, read before the damage."""
    keys_before: set[str]
    put: Callable[[str, bytes], None]


def _keys(store: RemoteStore, tp: TopicPartitionId) -> set[str]:
    return {k for k, _ in store.list_dir(RemoteLayout(store.root).partition_dir(tp))}


def _read(tier: Tier, tp: TopicPartitionId, *, refresh: bool = False) -> list[tuple[int, bytes | None]]:
    with RemoteReader(tier.store()) as reader:
        start = reader.manifest(tp, refresh=refresh).start_offset
        assert start is not None
        return [(r.offset, r.value) for r in reader.read_from_offset(tp, start)]


def _plant(tier: Tier, data: Dataset, broker: KafkaCluster, put: Callable[[str, bytes], None]) -> Planted:
    topic = data.codec_topics[2]
    copy_to(tier, data, broker, [topic])
    store = tier.store()
    with RemoteReader(store) as reader:
        tp = reader.resolve(topic, 0)
        segments = reader.manifest(tp, refresh=True).segments
    assert len(segments) >= 3, "the partition needs a segment in the middle"
    victim = segments[len(segments) // 2]
    reference = _read(tier, tp)
    key = RemoteLayout(store.root).object_key(tp, victim.base_offset, victim.segment_id, SegmentObject.LOG)
    original = store.get(key)
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0x40  # same size: only the batch CRCs can tell
    put(key, bytes(damaged))
    return Planted(tier, tp, victim, key, original, reference, _keys(store, tp), put)


@pytest.fixture(params=["file", "s3"])
def planted(
    request: pytest.FixtureRequest,
    spark_dataset: Dataset,
    kafka_broker: KafkaCluster,
    tmp_path: Path,
) -> Planted:
    if request.param == "file":
        url = f"file://{tmp_path / 'tier'}"
        tier = Tier(url, {}, {"remote": url}, ["--remote", url], {})

        def put(key: str, data: bytes) -> None:
            Path("/" + key.lstrip("/")).write_bytes(data)

        return _plant(tier, spark_dataset, kafka_broker, put)
    moto: MotoServer = request.getfixturevalue("moto_server")
    import s3fs

    options: dict[str, Any] = moto.storage_options()
    fs = s3fs.S3FileSystem(**options)
    bucket = f"quarantine-{uuid.uuid4().hex[:8]}"
    fs.mkdir(bucket)
    url = f"s3://{bucket}/tier"
    flags = ["--remote", url, "--endpoint-url", moto.endpoint_url, "--path-style"]
    env = {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]}
    # This process lists after the CLI's children wrote: no cached listings (s3fs keeps them per process).
    tier = Tier(url, {**options, "use_listings_cache": False}, {"remote": url}, flags, env)
    return _plant(tier, spark_dataset, kafka_broker, lambda key, data: fs.pipe(key, data))


def _scrub(p: Planted, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = run_cli(
        "scrub", "--topic", p.tp.topic, "--spark-master", "local[2]", "--json", *extra, *p.tier.cli_flags,
        env=p.tier.env, timeout=600,
    )  # fmt: skip
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def _partition(report: dict[str, Any], tp: TopicPartitionId) -> dict[str, Any]:
    found: dict[str, Any] = next(p for p in report["partitions"] if p["partition"] == tp.partition)
    return found


def test_quarantine_stops_serving_the_damaged_segment_deletes_nothing_and_release_undoes_it(
    planted: Planted,
) -> None:
    p = planted
    victim_id = str(p.victim.segment_id)
    hole = range(p.victim.base_offset, p.victim.next_offset)
    with pytest.raises(CorruptDataError):
        _read(p.tier, p.tp)  # served while damaged: a reader fails on it

    status, report = _scrub(p, "--quarantine")
    assert status == 3
    assert {d["key"] for d in _partition(report, p.tp)["damage"]} == {p.log_key}
    assert _partition(report, p.tp)["quarantined"] == [victim_id]
    assert report["quarantined_segments"] == 1

    # Out of the serving path for every reader: the stored manifest (no refresh) and a listing.
    store = p.tier.store()
    catalog = PartitionCatalog(store, RemoteLayout(store.root), p.tp)
    stored = catalog.read_manifest()
    assert stored is not None and victim_id not in {str(m.segment_id) for m in stored.finished()}
    expected = [(o, v) for o, v in p.reference if o not in hole]
    assert _read(p.tier, p.tp) == expected
    assert _read(p.tier, p.tp, refresh=True) == expected
    # Nothing deleted: every object is still there, plus the one marker.
    after = _keys(store, p.tp)
    assert p.keys_before <= after
    marker = RemoteLayout(store.root).marker_key(
        p.tp, p.victim.base_offset, p.victim.segment_id, SegmentState.QUARANTINED
    )
    assert after - p.keys_before == {marker}
    recorded = json.loads(store.get(marker))
    assert recorded["state"] == "QUARANTINED" and p.log_key in recorded["problem"]

    # A plain scrub no longer reports it as damage (it is not served) but names it as in quarantine.
    status, report = _scrub(p)
    assert status == 0 and report["damaged_objects"] == 0
    assert _partition(report, p.tp)["quarantined"] == [victim_id]

    # The undo: release serves it again (still damaged, so a read fails on it again) ...
    released = run_cli(
        "scrub", "--topic", p.tp.topic, "--release", victim_id, *p.tier.cli_flags, env=p.tier.env
    )
    assert released.returncode == 0, released.stderr
    assert victim_id in released.stdout
    with pytest.raises(CorruptDataError):
        _read(p.tier, p.tp)
    # ... and with the good bytes put back (e.g. restored from a backup) the partition is whole again.
    p.put(p.log_key, p.original)
    assert _read(p.tier, p.tp) == p.reference
    again = run_cli("scrub", "--topic", p.tp.topic, "--release", victim_id, *p.tier.cli_flags, env=p.tier.env)
    assert again.returncode == 1 and f"no quarantined segment {victim_id}" in again.stderr


_CHILD = """
import json, sys, time
from storage_core.adapters.store import RemoteStore
from storage_core.remote.layout import TopicPartitionId
from storage_core.remote.scrub import scrub_partition
from storage_core.retention.quarantine import quarantine
store = RemoteStore(sys.argv[1], json.loads(sys.argv[2]))
tp = TopicPartitionId(*json.loads(sys.argv[3]))
quarantine(store, tp, scrub_partition(store, tp).damage, int(time.time() * 1000))
"""


def test_a_crash_between_marker_and_manifest_is_finished_by_the_next_quarantine(planted: Planted) -> None:
    p = planted
    store = p.tier.store()
    catalog = PartitionCatalog(store, RemoteLayout(store.root), p.tp)
    catalog.rebuild_manifest(write=True)  # the stored manifest lists the victim
    # A child process scrubs and quarantines, and is SIGKILLed between the marker and the manifest.
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            p.tier.url,
            json.dumps(p.tier.storage_options),
            json.dumps([p.tp.topic, p.tp.topic_id, p.tp.partition]),
        ],
        env={**os.environ, ENV: "scrub.quarantine.marked:1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    victim_id = str(p.victim.segment_id)
    stale = catalog.read_manifest()
    assert stale is not None and victim_id in {str(m.segment_id) for m in stale.finished()}
    # The marker is the truth: a manifest rebuilt from the markers (what the DataSource plans with, and
    # copy, cleanup and scrub use) no longer lists the segment.
    with RemoteReader(store) as reader:
        rebuilt = reader.manifest(p.tp, refresh=True)
    assert victim_id not in {str(m.segment_id) for m in rebuilt.finished()}
    hole = range(p.victim.base_offset, p.victim.next_offset)

    status, report = _scrub(p, "--quarantine")
    assert status == 0, "the quarantined segment is not scrubbed again"
    assert _partition(report, p.tp)["quarantined"] == [victim_id]
    fixed = catalog.read_manifest()
    assert fixed is not None and victim_id not in {str(m.segment_id) for m in fixed.finished()}
    assert _read(p.tier, p.tp) == [(o, v) for o, v in p.reference if o not in hole]
