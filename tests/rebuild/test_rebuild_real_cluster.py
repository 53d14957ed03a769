"""Rebuild a replaced broker of a real 3-broker cluster (RF 3) from the remote tier.

One cluster for the module. Data: an idempotent topic with a local window (``local.retention.bytes``)
and a transactional topic without one, tiered by ``tierkeeper copy`` from broker 1's log dir, then an
untiered tail. Broker 3 is stopped, its log dir wiped down to meta.properties, rebuilt, and started.
References: Kafka's Admin API, Kafka's own files on the leaders and its server log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.kafka import KafkaCluster
from harness.kafka_dist import HarnessError
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore
from storage_core.errors import KafkaAdminError
from storage_core.faults import ENV
from storage_core.formats.segment_files import parse_partition_dir_name
from storage_core.rebuild.plan import RebuildRefused
from storage_core.rebuild.state import MARKER, META, META_ASIDE, STAGING_DIR, RebuildDir, Situation, classify
from storage_core.remote.metadata import SegmentMetadata
from storage_core.remote.reader import RemoteReader

from .real import (
    REBUILT,
    Tiered,
    batches_from,
    cli_args,
    create_topic,
    log_end,
    log_files,
    produce,
    produce_transactions,
    rebuild_args,
    rebuild_json,
    run_cli,
    server_log_since_last_start,
    snapshot_entries,
    stop_and_wipe,
    tier,
    wait_in_sync,
)

pytestmark = pytest.mark.kafka

EVENTS, LEDGER = "events", "ledger"
WINDOW = 400_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    kafka = KafkaCluster(tmp_path_factory.mktemp("rebuild-kafka"), brokers=3)
    try:
        yield kafka.start()
    finally:
        kafka.stop()


@pytest.fixture(scope="module")
def tiered(cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Tiered:
    remote = f"file://{tmp_path_factory.mktemp('rebuild-remote')}"
    create_topic(cluster, EVENTS, 3, {"local.retention.bytes": str(WINDOW)})
    create_topic(cluster, LEDGER, 1)
    produce(cluster, EVENTS, 3, 3_000, seed=1)  # a producer that writes only at the very start
    produce(cluster, EVENTS, 3, 2_000_000, seed=2)
    produce_transactions(cluster, LEDGER, 30, seed=3)
    tier(cluster, remote, EVENTS, LEDGER)
    produce(cluster, EVENTS, 3, 300_000, seed=4)  # the untiered tail
    produce_transactions(cluster, LEDGER, 5, seed=5)
    return Tiered(remote, [EVENTS, LEDGER], EVENTS, WINDOW, {EVENTS: 3, LEDGER: 1})


@dataclass
class Rebuilt:
    summary: dict[str, Any]
    before: dict[str, dict[str, bytes]]
    listing: list[str]
    seconds_to_sync: float

    def partition(self, topic: str, p: int) -> dict[str, Any]:
        found: dict[str, Any] = next(
            x for x in self.summary["partitions"] if x["topic"] == topic and x["partition"] == p
        )
        return found


@pytest.fixture(scope="module")
def rebuilt(cluster: KafkaCluster, tiered: Tiered) -> Rebuilt:
    stop_and_wipe(cluster)
    summary = rebuild_json(cluster, tiered.remote)
    data = cluster.log_dir(REBUILT)
    before = {d.name: log_files(d) for d in data.iterdir() if d.is_dir() and parse_partition_dir_name(d.name)}
    listing = sorted(os.listdir(data))
    cluster.start_broker(REBUILT)
    return Rebuilt(summary, before, listing, wait_in_sync(cluster, tiered.topics))


def manifest_segments(tiered: Tiered, topic: str, p: int) -> list[SegmentMetadata]:
    reader = RemoteReader(RemoteStore(tiered.remote))
    try:
        return reader.manifest(reader.resolve(topic, p)).segments
    finally:
        reader.close()


def replica_dir(cluster: KafkaCluster, topic: str, p: int) -> Path:
    """Broker 1's copy: in sync and identical to the leader's (which may move back to broker 3 later)."""
    return cluster.log_dir(1) / f"{topic}-{p}"


def test_the_restored_dir_holds_only_what_kafka_needs(rebuilt: Rebuilt) -> None:
    assert rebuilt.summary["action"] == "rebuilt"
    assert META in rebuilt.listing and MARKER in rebuilt.listing
    assert ".kafka_cleanshutdown" not in rebuilt.listing, "Kafka must run recovery over restored data"
    assert not [n for n in rebuilt.listing if "checkpoint" in n], "Kafka derives log start and recovery point"
    assert STAGING_DIR not in rebuilt.listing and META_ASIDE not in rebuilt.listing


def test_window_and_full_restores_follow_the_remote_manifest(
    rebuilt: Rebuilt, tiered: Tiered, cluster: KafkaCluster
) -> None:
    ends = KafkaAdmin(cluster.bootstrap_servers).high_watermarks(
        [(t, p) for t, n in tiered.partitions.items() for p in range(n)]
    )
    for topic, count in tiered.partitions.items():
        for p in range(count):
            got = rebuilt.partition(topic, p)
            segments = manifest_segments(tiered, topic, p)
            restored = [s for s in segments if s.base_offset >= got["restored_start"]]
            assert got["restored_end"] == segments[-1].next_offset, (
                "everything tiered up to the newest segment"
            )
            assert got["segments"] == len(restored)
            assert got["expected_tail"] == ends[(topic, p)] - got["restored_end"] > 0
            if topic == tiered.windowed_topic:
                size = sum(s.size_bytes for s in restored)
                older = segments[len(segments) - len(restored) - 1]
                assert size <= tiered.window_bytes < size + older.size_bytes, (
                    "newest segments that fit the window"
                )
            else:
                assert got["restored_start"] == segments[0].base_offset == 0


def test_it_rejoins_the_isr_at_the_leaders_log_end(
    rebuilt: Rebuilt, tiered: Tiered, cluster: KafkaCluster
) -> None:
    admin = KafkaAdmin(cluster.bootstrap_servers)
    described = admin.describe(tiered.topics)
    ends = admin.high_watermarks(list(described))
    for (topic, p), info in described.items():
        assert REBUILT in info.isr, f"{topic}-{p}: {info}"
        mine = log_end(cluster.log_dir(REBUILT) / f"{topic}-{p}")
        assert mine == ends[(topic, p)] == log_end(replica_dir(cluster, topic, p))


def test_nothing_restored_is_renamed_stray_or_truncated(
    rebuilt: Rebuilt, tiered: Tiered, cluster: KafkaCluster
) -> None:
    data = cluster.log_dir(REBUILT)
    assert not [n for n in os.listdir(data) if n.endswith("-stray")]
    log = server_log_since_last_start(cluster, REBUILT)
    assert "stray" not in log.lower()
    for name, files in rebuilt.before.items():
        topic, p = name.rsplit("-", 1)
        restored_end = rebuilt.partition(topic, int(p))["restored_end"]
        # The follower fetched from the end of what was restored, not from a high watermark of 0.
        assert re.search(rf"Follower {name} starts at leader epoch \d+ from offset {restored_end} ", log), (
            name
        )
        last = max(files)
        for file_name, content in files.items():
            now = (data / name / file_name).read_bytes()
            assert now == content if file_name != last else now.startswith(content), f"{name}/{file_name}"


def test_only_the_untiered_tail_is_replicated(rebuilt: Rebuilt, cluster: KafkaCluster) -> None:
    data = cluster.log_dir(REBUILT)
    total_replicated = total_tail = 0
    for name, files in rebuilt.before.items():
        topic, p = name.rsplit("-", 1)
        restored_end = rebuilt.partition(topic, int(p))["restored_end"]
        after = sum(len(b) for b in log_files(data / name).values())
        replicated = after - sum(len(b) for b in files.values())
        tail_bytes, _ = batches_from(replica_dir(cluster, topic, int(p)), restored_end)
        assert replicated == tail_bytes, (
            f"{name}: replicated {replicated} bytes, the leader's tail is {tail_bytes}"
        )
        total_replicated += replicated
        total_tail += tail_bytes
    restored = sum(len(b) for files in rebuilt.before.values() for b in files.values())
    assert total_replicated == total_tail < restored


def test_producer_state_older_than_the_window_survives(
    rebuilt: Rebuilt, tiered: Tiered, cluster: KafkaCluster
) -> None:
    for p in range(tiered.partitions[tiered.windowed_topic]):
        got = rebuilt.partition(tiered.windowed_topic, p)
        assert got["restored_start"] > 0
        name = f"{tiered.windowed_topic}-{p}/{got['restored_end']:020d}.snapshot"
        # Broker 1 took this snapshot when it rolled the segment; broker 3 wrote its own while recovering
        # the restored segments, starting from the restored snapshot.
        theirs = snapshot_entries(cluster.log_dir(1) / name)
        ours = snapshot_entries(cluster.log_dir(REBUILT) / name)
        assert len(theirs) >= 2, "the early producer and the main one"
        assert ours == theirs


def test_rerun_on_the_rebuilt_dir_is_a_no_op(rebuilt: Rebuilt, tiered: Tiered, cluster: KafkaCluster) -> None:
    data = cluster.log_dir(REBUILT)
    args = rebuild_args(cluster, tiered.remote)
    cluster.stop_broker(REBUILT)
    before = {str(f): (f.stat().st_mtime_ns, f.stat().st_size) for f in data.rglob("*")}
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    assert '"action": "already-rebuilt"' in again.stdout
    text = run_cli(*args[:-1])
    assert text.returncode == 0 and text.stdout.startswith("already-rebuilt: ")
    assert f"  {EVENTS}-0: [{rebuilt.partition(EVENTS, 0)['restored_start']}, " in text.stdout
    assert {str(f): (f.stat().st_mtime_ns, f.stat().st_size) for f in data.rglob("*")} == before
    cluster.start_broker(REBUILT)
    wait_in_sync(cluster, tiered.topics)


def test_a_running_brokers_lock_is_seen(cluster: KafkaCluster) -> None:
    # Kafka's FileLock and our POSIX record lock on .lock exclude each other.
    running = RebuildDir(cluster.log_dir(1))
    assert running.is_locked_by_other()
    with pytest.raises(RebuildRefused, match="locked"):
        with running.locked():
            pass


def _refused_start(cluster: KafkaCluster) -> str:
    with pytest.raises(HarnessError):
        cluster.start_broker(REBUILT)
    assert not cluster.is_running(REBUILT)
    return server_log_since_last_start(cluster, REBUILT)


def test_kafka_refuses_a_dir_with_either_guard(cluster: KafkaCluster, tiered: Tiered) -> None:
    stop_and_wipe(cluster)
    data = cluster.log_dir(REBUILT)
    os.rename(data / META, data / META_ASIDE)
    log = _refused_start(cluster)
    assert "meta.properties" in log and "ERROR" in log
    os.rename(data / META_ASIDE, data / META)

    (data / STAGING_DIR / f"{EVENTS}-0").mkdir(parents=True)
    log = _refused_start(cluster)
    assert STAGING_DIR in log and "ERROR" in log
    stop_and_wipe(cluster)


def _whole_or_unstartable(data: Path, reference: dict[str, bytes]) -> None:
    """The invariant at every kill: a dir Kafka would start on is the empty dir or the whole restore."""
    if (data / META).exists() and not (data / STAGING_DIR).exists():
        partitions = {k: v for k, v in _tree(data).items() if parse_partition_dir_name(k.split("/")[0])}
        assert partitions in ({}, {k: v for k, v in reference.items() if "/" in k})


def _tree(data: Path) -> dict[str, bytes]:
    """meta.properties and the partition dirs (a refused Kafka start may leave its metadata log behind)."""
    return {
        str(f.relative_to(data)): f.read_bytes()
        for f in sorted(data.rglob("*"))
        if f.is_file() and (f.name == META or parse_partition_dir_name(f.relative_to(data).parts[0]))
    }


def test_kill_9_during_rebuild_always_converges(cluster: KafkaCluster, tiered: Tiered) -> None:
    stop_and_wipe(cluster)
    data = cluster.log_dir(REBUILT)
    args = cli_args(*rebuild_args(cluster, tiered.remote, "--parallelism", "2"))
    assert subprocess.run(args, capture_output=True, check=False).returncode == 0
    reference = _tree(data)
    assert len([k for k in reference if k.endswith(".log")]) > 20

    # Each trial kills the rebuild at named points (storage_core/faults.py), so every kill lands where
    # the trial says whatever the machine's speed: mid-file, between files, at the install step; a
    # second entry kills the resumed run too.
    trials = [
        ["rebuild.chunk.written:1"],
        ["rebuild.file.restored:1"],
        ["rebuild.chunk.written:7"],
        ["rebuild.file.restored:5", "rebuild.file.restored:3"],
        ["rebuild.file.restored:15"],
        ["rebuild.installing:1"],
        ["rebuild.chunk.written:3", "rebuild.installing:1"],
        ["rebuild.file.restored:20", "rebuild.chunk.written:2"],
    ]
    states: list[Situation] = []
    actions: list[str] = []
    kafka_tried = False
    for trial, faults in enumerate(trials):
        stop_and_wipe(cluster)
        for fault in faults:
            proc = subprocess.run(args, capture_output=True, env={**os.environ, ENV: fault}, check=False)
            assert proc.returncode == -signal.SIGKILL, f"trial {trial}: {fault} did not land"
            state = classify(RebuildDir(data).observe(), data)
            expected = (
                Situation.INSTALLING if fault.startswith("rebuild.installing") else Situation.INTERRUPTED
            )
            assert state is expected, f"trial {trial}: {fault} left {state}"
            states.append(state)
            _whole_or_unstartable(data, reference)
        if state is Situation.INTERRUPTED and list((data / STAGING_DIR).glob("*/*.log")) and not kafka_tried:
            log = _refused_start(cluster)
            assert "meta.properties" in log or STAGING_DIR in log
            kafka_tried = True
        finish = subprocess.run(args, capture_output=True, text=True, check=False)
        assert finish.returncode == 0, finish.stderr
        actions.append(finish.stdout.split('"action": "', 1)[1].split('"', 1)[0])
        assert _tree(data) == reference, f"trial {trial} did not converge"
    print(f"kill -9 trials: states {[s.value for s in states]}, finishing runs {actions}")
    assert kafka_tried and "resumed" in actions and "installed" in actions, actions
    cluster.start_broker(REBUILT)
    wait_in_sync(cluster, tiered.topics)


def test_another_incarnation_of_a_topic_is_refused(cluster: KafkaCluster, tiered: Tiered) -> None:
    if not cluster.is_running(REBUILT):
        stop_and_wipe(cluster)
        cluster.start_broker(REBUILT)
    admin = KafkaAdmin(cluster.bootstrap_servers)
    create_topic(cluster, "reborn", 1)
    produce(cluster, "reborn", 1, 200_000, seed=6)
    tier(cluster, tiered.remote, "reborn")
    old_id = admin.describe(["reborn"])[("reborn", 0)].topic_id
    from confluent_kafka.admin import AdminClient

    deleter = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    deleter.delete_topics(["reborn"])["reborn"].result(60)
    deadline = time.monotonic() + 60
    while True:
        try:
            create_topic(cluster, "reborn", 1)
            break
        except Exception:  # noqa: BLE001 - the old incarnation is still being deleted
            assert time.monotonic() < deadline
            time.sleep(0.5)
    while True:
        # Brokers learn of the delete and the create a moment after the controller committed them:
        # until then a describe may fail or still show the old incarnation.
        try:
            if admin.describe(["reborn"])[("reborn", 0)].topic_id != old_id:
                break
        except KafkaAdminError:
            pass
        assert time.monotonic() < deadline, "the recreated topic kept the old topic id"
        time.sleep(0.5)

    stop_and_wipe(cluster)
    data = cluster.log_dir(REBUILT)
    base = (
        "rebuild",
        "--log-dir",
        str(data),
        "--bootstrap-servers",
        cluster.bootstrap_servers,
        "--remote",
        tiered.remote,
        "--dry-run",
    )
    refused = run_cli(*base, "--broker-id", str(REBUILT))
    assert refused.returncode == 1
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("tierkeeper rebuild: error: reborn-0:") and old_id in line
    assert run_cli(*base, "--broker-id", str(REBUILT), "--exclude-topic", "reborn").returncode == 0
    wrong = run_cli(*base, "--broker-id", "2", "--exclude-topic", "reborn")
    assert wrong.returncode == 1 and "node.id 3" in wrong.stderr.strip().splitlines()[-1]
    assert sorted(os.listdir(data)) == [META]
