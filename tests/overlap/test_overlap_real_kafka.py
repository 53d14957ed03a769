"""Overlapping remote segments made by a real leader change (issue 21), read, retained and rebuilt.

One real 3-node Kafka 4.1.1 cluster for the module. The topic has two replicas (brokers 1 and 2) and no
topic-level segment size, so each broker rolls by its own ``log.segment.bytes`` (set per broker through
the Admin API: 1 MiB on broker 1, 1.4 MiB on broker 2). The data is tiered by ``tierkeeper copy`` from
broker 1's log dir while it leads; broker 1 is then stopped (a controlled shutdown hands the leadership
to broker 2), more data is produced, and ``tierkeeper copy`` runs from broker 2's log dir. Broker 2's
oldest untiered segment starts below the tiered end, so the remote tier holds two segments for the same
offsets. The reference for every read is a real consumer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from storage.dataset import Expected, consume

from harness.kafka import KafkaCluster
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore
from storage_core.errors import DivergentDataError
from storage_core.formats.record_batch import iter_batch_headers
from storage_core.formats.source import bytes_fetcher
from storage_core.remote.catalog import PartitionCatalog
from storage_core.remote.layout import RemoteLayout, SegmentObject, SegmentState, TopicPartitionId
from storage_core.remote.metadata import Manifest, SegmentMetadata
from storage_core.remote.reader import RemoteReader
from storage_core.retention.policy import RetentionPolicy
from storage_core.retention.remote_cleanup import cleanup_partition

pytestmark = pytest.mark.kafka

TOPIC = "moved"
ROLL_BYTES = {1: 1 << 20, 2: 1_468_006}
T0 = 1_700_000_000_000  # record i has CreateTime T0 + i, so a timestamp names exactly one offset


@dataclass
class Scenario:
    cluster: KafkaCluster
    remote: Path
    """The remote tier after both copies."""
    after_first_copy: Path
    """A copy of the remote tier as the first copy (from broker 1) left it."""
    expected: list[Expected]
    old: SegmentMetadata
    """Broker 1's segment that the new leader's copy overlaps."""
    new: SegmentMetadata
    """Broker 2's overlapping segment."""

    def url(self, remote: Path | None = None) -> str:
        return f"file://{remote or self.remote}"

    def tp(self) -> TopicPartitionId:
        return self.old.tp

    def expected_from(
        self, offset: int, until: int | None = None
    ) -> list[tuple[int, int, bytes | None, bytes | None]]:
        return [
            (e.offset, e.timestamp, e.key, e.value)
            for e in self.expected
            if e.offset >= offset and (until is None or e.offset <= until)
        ]


def _set_roll_bytes(admin: AdminClient) -> None:
    for broker, size in ROLL_BYTES.items():
        entry = ConfigEntry("log.segment.bytes", str(size), incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.BROKER, str(broker), incremental_configs=[entry])
        for fut in admin.incremental_alter_configs([resource]).values():
            fut.result(60)


def _produce(cluster: KafkaCluster, first: int, count: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 16384,
        }
    )
    errors: list[object] = []
    for i in range(first, first + count):
        value = (f"value-{i}-".encode() * 40)[: 200 + i % 300]
        while True:
            try:
                producer.produce(
                    TOPIC,
                    key=f"k{i}".encode(),
                    value=value,
                    partition=0,
                    timestamp=T0 + i,
                    on_delivery=lambda err, _m: errors.append(err) if err else None,
                )
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    assert errors == [], errors[:3]


def _wait_partition(cluster: KafkaCluster, *, leader: int, isr: set[int], timeout: float = 120) -> None:
    admin = KafkaAdmin(cluster.bootstrap_servers)
    deadline = time.monotonic() + timeout
    while True:
        info = admin.describe([TOPIC])[(TOPIC, 0)]
        if info.leader == leader and set(info.isr) == isr:
            return
        assert time.monotonic() < deadline, f"partition never reached leader {leader}, isr {isr}: {info}"
        time.sleep(0.2)


def _copy(cluster: KafkaCluster, broker: int, remote: Path) -> dict[str, object]:
    proc = run_cli(
        "copy",
        "--log-dir",
        str(cluster.log_dir(broker)),
        "--bootstrap-servers",
        cluster.bootstrap_servers,
        "--remote",
        f"file://{remote}",
        "--topic",
        TOPIC,
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def _manifest(remote: Path) -> Manifest:
    with RemoteReader(RemoteStore(f"file://{remote}")) as reader:
        return reader.manifest(reader.resolve(TOPIC, 0), refresh=True)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    cluster = KafkaCluster(tmp_path_factory.mktemp("overlap-kafka"), brokers=3).start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        _set_roll_bytes(admin)
        topic = NewTopic(TOPIC, 1, replica_assignment=[[1, 2]], config={"retention.ms": "-1"})
        admin.create_topics([topic])[TOPIC].result(60)
        cluster.wait_topic(TOPIC, 1)
        _wait_partition(cluster, leader=1, isr={1, 2})
        _produce(cluster, 0, 12_000)  # ~4.2 MB: four rolled segments on broker 1
        _wait_partition(cluster, leader=1, isr={1, 2})

        work = tmp_path_factory.mktemp("overlap-remote")
        remote = work / "tier"
        _copy(cluster, 1, remote)
        first = work / "after-first-copy"
        shutil.copytree(remote, first)

        cluster.stop_broker(1)  # controlled shutdown: broker 2, in sync, takes over
        _wait_partition(cluster, leader=2, isr={2})
        _produce(cluster, 12_000, 8_000)
        _copy(cluster, 2, remote)
        cluster.start_broker(1)
        _wait_partition(cluster, leader=2, isr={1, 2})

        end = KafkaAdmin(cluster.bootstrap_servers).high_watermarks([(TOPIC, 0)])[(TOPIC, 0)]
        expected = consume(cluster.bootstrap_servers, TOPIC, 0, "read_committed", end - 1)
        assert [e.offset for e in expected] == list(range(end)), "the reference consumer missed records"

        manifest = _manifest(remote)
        finished = manifest.finished()
        pairs = [
            (a, b)
            for a in finished
            for b in finished
            if a.base_offset < b.base_offset <= a.end_offset < b.end_offset
        ]
        assert pairs, (
            "the leader change left no overlapping segments (brokers rolled at the same offsets?): "
            f"{[(s.base_offset, s.end_offset) for s in finished]}"
        )
        old, new = pairs[0]
        yield Scenario(cluster, remote, first, expected, old, new)
    finally:
        cluster.stop()


def _log_object(scenario: Scenario, meta: SegmentMetadata, remote: Path | None = None) -> bytes:
    store = RemoteStore(scenario.url(remote))
    key = RemoteLayout(store.root).object_key(meta.tp, meta.base_offset, meta.segment_id, SegmentObject.LOG)
    return store.get(key)


def _batches(data: bytes, first: int, last: int) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of the batches of a `.log` object lying within ``first``..``last``."""
    out = []
    for pos, header in iter_batch_headers(bytes_fetcher(data), size=len(data)):
        if header.base_offset >= first and header.last_offset <= last:
            out.append((header.base_offset, data[pos : pos + header.size_in_bytes]))
    return out


def test_both_copies_hold_the_overlapped_batches_byte_for_byte(scenario: Scenario) -> None:
    """What the cover rule relies on: a follower stores the leader's batches as they are, so the old
    segment's end is a batch boundary in the new one and the shared batches are identical."""
    old, new = scenario.old, scenario.new
    assert old.broker_id != new.broker_id or old.leader_epochs != new.leader_epochs
    shared_old = _batches(_log_object(scenario, old), new.base_offset, old.end_offset)
    shared_new = _batches(_log_object(scenario, new), new.base_offset, old.end_offset)
    assert shared_old and shared_old == shared_new
    starts = [base for base, _ in _batches(_log_object(scenario, new), 0, new.end_offset)]
    assert old.end_offset + 1 in starts

    cover = _manifest(scenario.remote).cover()
    assert not cover.divergences
    served = {r.segment.segment_id: (r.first_offset, r.last_offset) for r in cover.ranges}
    assert served[new.segment_id] == (old.end_offset + 1, new.end_offset)


def test_offset_reads_serve_every_offset_once_equal_to_a_consumer(scenario: Scenario) -> None:
    cover = _manifest(scenario.remote).cover()
    assert cover.start_offset == 0 and cover.end_offset is not None
    end = cover.end_offset
    old, new = scenario.old, scenario.new
    mid = (new.base_offset + old.end_offset) // 2
    with RemoteReader(RemoteStore(scenario.url())) as reader:
        tp = reader.resolve(TOPIC, 0)
        for start in (0, new.base_offset, mid, old.end_offset, old.end_offset + 1):
            got = [(r.offset, r.timestamp, r.key, r.value) for r in reader.read_from_offset(tp, start)]
            assert got == scenario.expected_from(start, end), f"read from {start}"
        batches = list(reader.read_batches_from_offset(tp, 0))
    spans = [(b.header.base_offset, b.header.last_offset) for b in batches]
    assert all(prev[1] < cur[0] for prev, cur in zip(spans, spans[1:])), "a batch was served twice"
    assert spans[0][0] == 0 and spans[-1][1] == end


def test_reads_through_ranged_gets_serve_every_offset_once(scenario: Scenario) -> None:
    """The same tier on memory://, where objects are fetched in ranges with read-ahead, not mapped."""
    memory = RemoteStore(f"memory://overlap-{uuid.uuid4().hex[:8]}")
    for f in scenario.remote.rglob("*"):
        if f.is_file():
            memory.put_atomic(f"{memory.root}/{f.relative_to(scenario.remote)}", f.read_bytes())
    end = _manifest(scenario.remote).cover().end_offset
    start = scenario.new.base_offset
    with RemoteReader(memory) as reader:
        tp = reader.resolve(TOPIC, 0)
        got = [(r.offset, r.timestamp, r.key, r.value) for r in reader.read_from_offset(tp, start)]
        by_time = [
            (r.offset, r.timestamp, r.key, r.value) for r in reader.read_from_timestamp(tp, T0 + start)
        ]
    assert got == by_time == scenario.expected_from(start, end)


def test_timestamp_reads_start_once_at_the_first_matching_record(scenario: Scenario) -> None:
    old, new = scenario.old, scenario.new
    end = _manifest(scenario.remote).cover().end_offset
    with RemoteReader(RemoteStore(scenario.url())) as reader:
        tp = reader.resolve(TOPIC, 0)
        for offset in (new.base_offset, (new.base_offset + old.end_offset) // 2, old.end_offset + 1):
            got = [
                (r.offset, r.timestamp, r.key, r.value) for r in reader.read_from_timestamp(tp, T0 + offset)
            ]
            assert got == scenario.expected_from(offset, end), f"read from timestamp of offset {offset}"


def test_cli_read_and_ls_show_each_offset_once(scenario: Scenario) -> None:
    end = _manifest(scenario.remote).cover().end_offset
    for flags, start in (
        (["--from-offset", "0"], 0),
        (["--from-timestamp", str(T0 + scenario.new.base_offset)], scenario.new.base_offset),
    ):
        proc = run_cli("read", "--remote", scenario.url(), "--topic", TOPIC, "--partition", "0", *flags)
        assert proc.returncode == 0, proc.stderr
        rows = [json.loads(line) for line in proc.stdout.splitlines()]
        got = [
            (r["offset"], r["timestamp"], r["key"]["utf8"].encode(), r["value"]["utf8"].encode())
            for r in rows
        ]
        assert got == scenario.expected_from(start, end)

    proc = run_cli("ls", "--remote", scenario.url(), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["segment_id"]: r for r in json.loads(proc.stdout)["segments"]}
    new = rows[str(scenario.new.segment_id)]
    assert (new["base_offset"], new["serves_from"]) == (scenario.new.base_offset, scenario.old.end_offset + 1)
    assert json.loads(proc.stdout)["divergent"] == []
    text = run_cli("ls", "--remote", scenario.url())
    assert f"{scenario.old.end_offset + 1}..{scenario.new.end_offset}" in text.stdout


def test_retention_over_the_overlapped_range_keeps_every_needed_offset(
    scenario: Scenario, tmp_path: Path
) -> None:
    remote = tmp_path / "tier"
    shutil.copytree(scenario.remote, remote)
    manifest = _manifest(remote)
    cover = manifest.cover()
    keep_from = next(i for i, r in enumerate(cover.ranges) if r.segment.segment_id == scenario.new.segment_id)
    # A byte limit that holds exactly the new leader's segment and everything after it: every older
    # segment expires, including the old leader's overlapping one.
    limit = sum(r.segment.size_bytes for r in cover.ranges[keep_from:])
    store = RemoteStore(f"file://{remote}")
    catalog = PartitionCatalog(store, RemoteLayout(store.root), scenario.tp())
    result = cleanup_partition(catalog, RetentionPolicy(retention_bytes=limit))
    deleted = {d["segment_id"] for d in result.deleted}
    assert str(scenario.old.segment_id) in deleted and str(scenario.new.segment_id) not in deleted
    assert result.remote_start_offset == scenario.new.base_offset

    after = _manifest(remote).cover()
    assert after.start_offset == scenario.new.base_offset and after.ranges[0].whole
    with RemoteReader(RemoteStore(f"file://{remote}")) as reader:
        tp = reader.resolve(TOPIC, 0)
        got = [
            (r.offset, r.timestamp, r.key, r.value)
            for r in reader.read_from_offset(tp, scenario.new.base_offset)
        ]
    assert got == scenario.expected_from(scenario.new.base_offset, after.end_offset)


@pytest.mark.parametrize("point", ["before-finish", "after-finish"])
def test_a_copy_killed_at_the_overlapping_segment_leaves_each_offset_served_once(
    scenario: Scenario, point: str, tmp_path: Path
) -> None:
    remote = tmp_path / "tier"
    shutil.copytree(scenario.after_first_copy, remote)
    first_end = _manifest(remote).cover().end_offset
    assert first_end is not None and first_end >= scenario.old.end_offset
    args = [
        "--log-dir",
        str(scenario.cluster.log_dir(2)),
        "--bootstrap-servers",
        scenario.cluster.bootstrap_servers,
    ]
    args += ["--remote", f"file://{remote}", "--topic", TOPIC, "--parallelism", "1"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "overlap.killed_copy", point, str(scenario.new.base_offset), "--", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == -9, f"the fault hook did not fire: {proc.returncode} {proc.stderr[-2000:]}"

    store = RemoteStore(f"file://{remote}")
    catalog = PartitionCatalog(store, RemoteLayout(store.root), scenario.tp())
    states = {
        e.base_offset: e.state
        for e in catalog.listing().segments.values()
        if e.base_offset == scenario.new.base_offset
    }
    expected_state = SegmentState.COPY_STARTED if point == "before-finish" else SegmentState.COPY_FINISHED
    assert states == {scenario.new.base_offset: expected_state}
    end = _manifest(remote).cover().end_offset
    assert end == (first_end if point == "before-finish" else scenario.new.end_offset)
    with RemoteReader(store) as reader:
        tp = reader.resolve(TOPIC, 0)
        got = [(r.offset, r.timestamp, r.key, r.value) for r in reader.read_from_offset(tp, 0)]
        # After "after-finish" the stored manifest does not list the finished overlapping segment yet: a
        # read ends where that manifest ends (a snapshot), and going on from there finds the rest.
        assert got == scenario.expected_from(0, got[-1][0])
        if got[-1][0] < end:
            got += [
                (r.offset, r.timestamp, r.key, r.value) for r in reader.read_from_offset(tp, got[-1][0] + 1)
            ]
    assert got == scenario.expected_from(0, end)

    proc = run_cli("copy", *args)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("cleanup", "--remote", f"file://{remote}", "--orphan-grace-ms", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    cover = _manifest(remote).cover()
    assert cover.end_offset == _manifest(scenario.remote).cover().end_offset
    with RemoteReader(RemoteStore(f"file://{remote}")) as reader:
        tp = reader.resolve(TOPIC, 0)
        got = [(r.offset, r.timestamp, r.key, r.value) for r in reader.read_from_offset(tp, 0)]
    assert got == scenario.expected_from(0, cover.end_offset)
    leftovers = [e for e in catalog.listing().segments.values() if e.state is SegmentState.COPY_STARTED]
    assert leftovers == []


def test_copies_that_disagree_are_refused_reported_and_kept(scenario: Scenario, tmp_path: Path) -> None:
    """An unclean election, modelled on the real tier: the new leader's copy claims a leader epoch of its
    own over the offsets it shares with the old leader's segment."""
    remote = tmp_path / "tier"
    shutil.copytree(scenario.remote, remote)
    store = RemoteStore(f"file://{remote}")
    catalog = PartitionCatalog(store, RemoteLayout(store.root), scenario.tp())
    new = catalog.read_marker(scenario.new.base_offset, scenario.new.segment_id, SegmentState.COPY_FINISHED)
    unclean = max(e for e, _ in new.leader_epochs) + 100
    catalog.write_marker(new.model_copy(update={"leader_epochs": [(unclean, new.base_offset)]}))
    store.delete([catalog.layout.manifest_key(scenario.tp())])

    cover = _manifest(remote).cover()
    assert cover.divergences
    contested = (
        min(d.first_offset for d in cover.divergences),
        max(d.last_offset for d in cover.divergences),
    )
    with RemoteReader(store) as reader:
        tp = reader.resolve(TOPIC, 0)
        got = []
        with pytest.raises(DivergentDataError, match="hold different data"):
            for r in reader.read_from_offset(tp, 0):
                got.append((r.offset, r.timestamp, r.key, r.value))
        assert got == scenario.expected_from(0, got[-1][0]) and got[-1][0] < contested[0]
        after = contested[1] + 1  # offsets only the new copy holds stay readable
        got = [(r.offset, r.timestamp, r.key, r.value) for r in reader.read_from_offset(tp, after)]
        by_time = [
            (r.offset, r.timestamp, r.key, r.value) for r in reader.read_from_timestamp(tp, T0 + after)
        ]
        with pytest.raises(DivergentDataError):
            list(reader.read_from_timestamp(tp, T0 + contested[0]))
    assert got == by_time == scenario.expected_from(after, cover.end_offset)

    proc = run_cli(
        "read", "--remote", f"file://{remote}", "--topic", TOPIC, "--partition", "0", "--from-offset", "0"
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "hold different data" in proc.stderr
    proc = run_cli("ls", "--remote", f"file://{remote}", "--json")
    assert proc.returncode == 0 and len(json.loads(proc.stdout)["divergent"]) >= 1
    proc = run_cli("cleanup", "--remote", f"file://{remote}", "--remote-retention-bytes", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)["partitions"][0]
    assert report["divergent"]
    kept = {e.segment_id: e.state for e in catalog.listing().segments.values()}
    assert kept[scenario.old.segment_id] == kept[scenario.new.segment_id] == SegmentState.COPY_FINISHED


def test_rebuild_over_the_overlapped_range_restores_no_overlap_and_the_broker_serves_it(
    scenario: Scenario,
) -> None:
    """Last in the module: it replaces broker 1's disk and moves the leadership."""
    cluster = scenario.cluster
    cluster.stop_broker(1)
    _wait_partition(cluster, leader=2, isr={2})
    cluster.wipe_log_dir(1)
    proc = run_cli(
        "rebuild",
        "--log-dir",
        str(cluster.log_dir(1)),
        "--bootstrap-servers",
        cluster.bootstrap_servers,
        "--broker-id",
        "1",
        "--remote",
        scenario.url(),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    pdir = cluster.log_dir(1) / f"{TOPIC}-0"
    spans = []
    for f in sorted(pdir.glob("*.log")):
        data = f.read_bytes()
        headers = [h for _, h in iter_batch_headers(bytes_fetcher(data), size=len(data))]
        spans.append((int(f.stem), headers[0].base_offset, headers[-1].last_offset))
    assert spans, "nothing was restored"
    assert all(prev[2] < cur[1] for prev, cur in zip(spans, spans[1:])), (
        f"overlapping restored segments {spans}"
    )
    # Whole segments, byte-identical: the chain starts at the new leader's segment, not inside it.
    assert spans[0][0] == scenario.new.base_offset
    assert (pdir / f"{scenario.new.base_offset:020d}.log").read_bytes() == _log_object(scenario, scenario.new)

    cluster.start_broker(1)
    _wait_partition(cluster, leader=2, isr={1, 2}, timeout=180)
    cluster.stop_broker(2)  # broker 1 must now serve the restored log itself
    _wait_partition(cluster, leader=1, isr={1})
    try:
        end = KafkaAdmin(cluster.bootstrap_servers).high_watermarks([(TOPIC, 0)])[(TOPIC, 0)]
        served = consume(cluster.bootstrap_servers, TOPIC, 0, "read_committed", end - 1)
        assert served[0].offset == scenario.new.base_offset
        assert [(e.offset, e.timestamp, e.key, e.value) for e in served] == scenario.expected_from(
            scenario.new.base_offset
        )
    finally:
        cluster.start_broker(2)
