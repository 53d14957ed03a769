"""Kafka faults on a real 3-broker cluster: a broker restart and leader change in the middle of copy and of
cleanup, and an Admin API that cannot be reached (no local trim without Kafka's confirmation).

The commands pause at a named point of storage_core.faults (action ``stop``: the process SIGSTOPs itself
there); the test waits until the process is stopped, restarts the broker, and lets it continue. Nothing
depends on how fast the machine is.
"""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from harness.kafka import KafkaCluster
from harness.ports import free_ports
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore
from storage_core.errors import KafkaAdminError
from storage_core.remote.reader import RemoteReader

from .paused_cli import start_paused

pytestmark = pytest.mark.kafka

PARTITIONS = 3
RECORDS = 2500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    kafka = KafkaCluster(tmp_path_factory.mktemp("kafka-faults"), brokers=3)
    try:
        yield kafka.start()
    finally:
        kafka.stop()


def _topic(cluster: KafkaCluster) -> str:
    name = f"kfaults-{uuid.uuid4().hex[:8]}"
    topic_config = {"internal.segment.bytes": "65536", "retention.ms": "-1", "min.insync.replicas": "1"}
    KafkaAdmin(cluster.bootstrap_servers).create_topic(name, PARTITIONS, 3, topic_config)
    cluster.wait_topic(name, PARTITIONS)
    # Batches must fit a 64 KiB segment (the default 1 MiB batch is refused as RECORD_LIST_TOO_LARGE).
    config = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "linger.ms": 5,
        "batch.size": 16384,
        "acks": "all",
    }
    producer = Producer(config)
    errors: list[object] = []
    rng = random.Random(4)
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            value = rng.randbytes(rng.randint(40, 200))
            producer.produce(
                name,
                key=f"k{i}".encode(),
                value=value,
                partition=p,
                on_delivery=lambda err, _msg: errors.append(err) if err else None,
            )
            if i % 500 == 0:
                producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == [], errors[:3]
    return name


def _restart_a_leader(cluster: KafkaCluster, topic: str) -> tuple[int, int]:
    """Restart the broker leading a partition of ``topic`` (not a controller), so leadership moves; return
    the partition and its old leader."""
    admin = KafkaAdmin(cluster.bootstrap_servers)
    leaders = {p: info.leader for (_, p), info in admin.describe([topic]).items()}
    candidates = [(p, b) for p, b in sorted(leaders.items()) if b is not None and b not in cluster.voters]
    if not candidates:  # every partition led by a controller node: move one by restarting it anyway
        candidates = [(p, b) for p, b in sorted(leaders.items()) if b is not None]
    partition, broker = candidates[0]
    cluster.stop_broker(broker)
    # Ask the brokers still running (a client whose connection was to the stopped one may wait on it).
    survivors = ",".join(cluster.broker_address(n) for n in cluster.node_ids if n != broker)
    deadline = time.monotonic() + 120
    while _leader(survivors, topic, partition) in (broker, None):
        assert time.monotonic() < deadline, "no new leader elected in 120 s"
        time.sleep(0.2)
    cluster.start_broker(broker)
    return partition, broker


def _leader(bootstrap: str, topic: str, partition: int) -> int | None:
    try:
        return KafkaAdmin(bootstrap).describe([topic])[(topic, partition)].leader
    except KafkaAdminError:
        return None  # no answer yet: the cluster is still electing


def _consume(bootstrap: str, topic: str, partition: int, until: int) -> list[tuple[int, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"kf-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    out: list[tuple[int, bytes | None]] = []
    try:
        while not out or out[-1][0] < until:
            msg = consumer.poll(30)
            assert msg is not None and not msg.error(), f"consumer of {topic}-{partition} stalled"
            out.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def _tiered(store: RemoteStore, topic: str) -> dict[int, list[tuple[int, bytes | None]]]:
    with RemoteReader(store) as reader:
        out = {}
        for p in range(PARTITIONS):
            tp = reader.resolve(topic, p)
            manifest = reader.manifest(tp, refresh=True)
            assert manifest.start_offset is not None
            out[p] = [(r.offset, r.value) for r in reader.read_from_offset(tp, manifest.start_offset)]
        return out


def _copy_args(cluster: KafkaCluster, topic: str, remote: str) -> list[str]:
    log_dir = str(cluster.log_dir(1))
    return [
        "copy",
        "--log-dir",
        log_dir,
        "--bootstrap-servers",
        cluster.bootstrap_servers,
        "--topic",
        topic,
        "--remote",
        remote,
    ]


def _trim_args(bootstrap: str, topic: str, remote: str) -> list[str]:
    """The ``cleanup`` arguments that trim every local segment of ``topic`` already in the tier."""
    return [
        "cleanup", "--bootstrap-servers", bootstrap, "--topic", topic,
        "--local-retention-bytes", "0", "--remote", remote,
    ]  # fmt: skip


def _files(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def test_a_broker_restart_and_leader_change_during_copy_and_cleanup(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    topic = _topic(cluster)
    remote = f"file://{tmp_path / 'remote'}"
    store = RemoteStore(remote)

    copier = start_paused(_copy_args(cluster, topic, remote), "copy.segment.started", 240)
    partition, old_leader = _restart_a_leader(cluster, topic)
    os.kill(copier.pid, signal.SIGCONT)
    out, err = copier.communicate(timeout=300)
    assert copier.returncode == 0, err
    leaders = KafkaAdmin(cluster.bootstrap_servers).describe([topic])
    assert leaders[(topic, partition)].leader != old_leader, "the restart moved the partition's leadership"
    rerun = run_cli(*_copy_args(cluster, topic, remote))
    assert rerun.returncode == 0, rerun.stderr

    tiered = _tiered(store, topic)
    for p, records in tiered.items():
        assert [o for o, _ in records] == list(range(len(records))), f"partition {p}: gap-free from 0"
        assert records == _consume(cluster.bootstrap_servers, topic, p, records[-1][0]), f"partition {p}"

    cleaner = start_paused(_trim_args(cluster.bootstrap_servers, topic, remote), "cleanup.trim.recorded", 240)
    _restart_a_leader(cluster, topic)
    os.kill(cleaner.pid, signal.SIGCONT)
    _, err = cleaner.communicate(timeout=300)
    if (
        cleaner.returncode != 0
    ):  # a trim sent to a leader that moved may fail; it must fail clearly, then converge
        assert "Traceback" not in err and "tierkeeper cleanup: error:" in err, err
        again = run_cli(*_trim_args(cluster.bootstrap_servers, topic, remote))
        assert again.returncode == 0, again.stderr
    starts = KafkaAdmin(cluster.bootstrap_servers).log_start_offsets([(topic, p) for p in range(PARTITIONS)])
    for p, records in tiered.items():
        end = records[-1][0]
        assert 0 < starts[(topic, p)] <= end + 1, (
            f"partition {p}: trimmed to {starts[(topic, p)]}, tier ends {end}"
        )
    assert _tiered(store, topic) == tiered, "cleanup without remote retention leaves the tier as it was"


def test_cleanup_with_kafka_unreachable_fails_clearly_and_trims_nothing(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    topic = _topic(cluster)
    remote = f"file://{tmp_path / 'remote'}"
    copied = run_cli(*_copy_args(cluster, topic, remote))
    assert copied.returncode == 0, copied.stderr
    store = RemoteStore(remote)
    before_tier = _tiered(store, topic)
    before_files = _files(tmp_path / "remote")

    nowhere = f"127.0.0.1:{free_ports(1)[0]}"
    proc = run_cli(
        *_trim_args(nowhere, topic, remote),
        # Only how long the adapter waits for Kafka before it gives up (30 s when not set).
        "--kafka-property",
        "socket.timeout.ms=5000",
        timeout=300,
    )
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("tierkeeper cleanup: error:")]
    assert errors, proc.stderr
    starts = KafkaAdmin(cluster.bootstrap_servers).log_start_offsets([(topic, p) for p in range(PARTITIONS)])
    assert all(start == 0 for start in starts.values()), f"trimmed without Kafka's confirmation: {starts}"
    assert _tiered(store, topic) == before_tier
    assert _files(tmp_path / "remote") == before_files, "nothing was written or deleted in the tier"
