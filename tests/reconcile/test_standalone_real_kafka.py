"""``tierkeeper standalone`` against a real 3-broker Kafka: segments tiered from each partition's leader,
local data trimmed only behind the tier, history read back, kstatus Current; a compacted topic Stalled
and never copied; after a leader change with different segment boundaries the tier continues with no gap.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from harness.kafka import KafkaCluster
from harness.paths import REPO_ROOT
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore
from storage_core.jobs.resource_files import load_clusters, load_manifests
from storage_core.jobs.standalone import Standalone
from storage_core.remote.catalog import list_topics
from storage_core.remote.layout import RemoteLayout
from storage_core.remote.reader import RemoteReader


def kstatus(status: dict[str, Any], generation: int) -> str:
    """kstatus's generic rules (sigs.k8s.io/cli-utils pkg/kstatus/status/generic.go) for a custom resource."""
    if status.get("observedGeneration") != generation:
        return "InProgress"
    for condition in status.get("conditions", []):
        if condition["type"] == "Reconciling" and condition["status"] == "True":
            return "InProgress"
        if condition["type"] == "Stalled" and condition["status"] == "True":
            return "Failed"
    return "Current"


def write_setup(tmp: Path, cluster: KafkaCluster, topics: dict[str, dict[str, Any]]) -> tuple[Path, Path]:
    remote = tmp / "remote"
    remote.mkdir()
    cluster_file = tmp / "cluster.yaml"
    cluster_file.write_text(
        yaml.safe_dump(
            {
                "name": "local",
                "bootstrapServers": cluster.bootstrap_servers,
                "remote": {"url": f"file://{remote}"},
            }
        )
    )
    manifests = tmp / "manifests"
    manifests.mkdir()
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "tierkeeper.io/v1alpha1",
            "kind": "TieredBroker",
            "metadata": {"name": f"broker-{n}", "namespace": "t"},
            "spec": {
                "clusterRef": {"name": "local"},
                "brokerId": n,
                "logDir": {"path": str(cluster.log_dir(n))},
            },
        }
        for n in cluster.node_ids
    ]
    docs += [
        {
            "apiVersion": "tierkeeper.io/v1alpha1",
            "kind": "TieredTopic",
            "metadata": {"name": name, "namespace": "t"},
            "spec": {"clusterRef": {"name": "local"}, "topic": name, **spec},
        }
        for name, spec in topics.items()
    ]
    (manifests / "all.yaml").write_text(yaml.safe_dump_all(docs))
    return cluster_file, manifests


def create_topic(
    cluster: KafkaCluster, name: str, partitions: int, config: dict[str, str], **kw: Any
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, config=config, **kw)])[name].result(60)
    cluster.wait_topic(name, partitions)


def produce(cluster: KafkaCluster, topic: str, count: int, size: int, start: int = 0) -> None:
    # Batches must fit the small segments of the first test.
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5, "acks": "all", "batch.size": 16384}
    )
    errors: list[Any] = []
    for i in range(start, start + count):
        value = (f"{i:08d}" + os.urandom(size // 2).hex())[:size].encode()
        producer.produce(
            topic, key=str(i).encode(), value=value, on_delivery=lambda e, _m: errors.append(e) if e else None
        )
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:3]


def remote_offsets(remote: Path, topic: str, partition: int) -> list[int]:
    store = RemoteStore(f"file://{remote}")
    with RemoteReader(store) as reader:
        tp = reader.resolve(topic, partition)
        manifest = reader.manifest(tp, refresh=True)
        assert manifest.start_offset is not None
        return [r.offset for r in reader.read_from_offset(tp, manifest.start_offset)]


class Clock:
    def __init__(self) -> None:
        self.now = datetime.datetime.now(datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now


def test_standalone_tiers_trims_reads_back_and_refuses_a_compacted_topic(
    kafka_cluster_factory: Callable[..., KafkaCluster], tmp_path: Path
) -> None:
    cluster = kafka_cluster_factory(3)
    create_topic(
        cluster,
        "orders",
        3,
        {"internal.segment.bytes": str(64 * 1024), "retention.ms": "-1"},
        replication_factor=3,
    )
    create_topic(
        cluster,
        "profiles",
        1,
        {"cleanup.policy": "compact", "internal.segment.bytes": str(64 * 1024)},
        replication_factor=3,
    )
    produce(cluster, "orders", 3000, 300)
    produce(cluster, "profiles", 1000, 300)
    topics = {
        "orders": {"localRetentionMs": -1, "localRetentionBytes": 128 * 1024},
        "profiles": {},
    }
    cluster_file, manifests = write_setup(tmp_path, cluster, topics)

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "storage_core.cli",
            "standalone",
            "--cluster",
            str(cluster_file),
            "--manifests",
            str(manifests),
            "--once",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=600,
    )
    # Exit 1: profiles is not Ready (it is Stalled), which --once reports.
    assert proc.returncode == 1, proc.stderr
    statuses = json.loads(proc.stdout)["tieredTopics"]
    orders, profiles = statuses["t/orders"], statuses["t/profiles"]

    assert kstatus(orders, 1) == "Current", orders
    assert {c["type"]: c["status"] for c in orders["conditions"]} == {"Ready": "True"}
    assert orders["lastCopy"]["result"] == "Succeeded" and orders["lastCleanup"]["result"] == "Succeeded"
    assert orders["remote"]["segments"] > 3 and orders["remote"]["bytes"] > 3 * 64 * 1024
    assert orders["topicId"]

    assert kstatus(profiles, 1) == "Failed"
    stalled = next(c for c in profiles["conditions"] if c["type"] == "Stalled")
    assert stalled["reason"] == "CompactedTopic" and "cleanup.policy=compact" in stalled["message"]
    remote = tmp_path / "remote"
    assert [t for t, _ in list_topics(RemoteStore(f"file://{remote}"), RemoteLayout(str(remote)))] == [
        "orders"
    ]

    admin = KafkaAdmin(cluster.bootstrap_servers)
    starts = admin.log_start_offsets([("orders", p) for p in range(3)])
    for part in orders["remote"]["partitions"]:
        p = part["partition"]
        # Trimmed, and only behind the tier: every offset is readable from one tier or the other.
        assert 0 < starts[("orders", p)] <= part["endOffset"] + 1, (p, starts, part)
        offsets = remote_offsets(remote, "orders", p)
        assert offsets == list(range(0, part["endOffset"] + 1))


def wait_for_leader_everywhere(
    cluster: KafkaCluster, topic: str, partition: int, leader: int, timeout: float = 120.0
) -> None:
    running = [n for n in cluster.node_ids if cluster.is_running(n)]
    clients = {n: AdminClient({"bootstrap.servers": cluster.broker_address(n)}) for n in running}
    seen: dict[int, int | None] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node, client in clients.items():
            md = client.list_topics(topic, timeout=10).topics.get(topic)
            part = md.partitions.get(partition) if md is not None else None
            seen[node] = part.leader if part is not None else None
        if all(found == leader for found in seen.values()):
            return
        time.sleep(0.2)
    raise AssertionError(
        f"{topic}-{partition}: leader {leader} not seen by every broker in {timeout}s: {seen}"
    )


def test_leader_change_with_different_segment_boundaries_continues_the_tier(
    kafka_cluster_factory: Callable[..., KafkaCluster], tmp_path: Path
) -> None:
    cluster = kafka_cluster_factory(3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    # Each broker rolls at its own size, so replicas of one partition have different segment boundaries.
    for node, size in ((1, 1 << 20), (2, 3 << 19), (3, 3 << 19)):
        resource = ConfigResource(
            ConfigResource.Type.BROKER,
            str(node),
            incremental_configs=[
                ConfigEntry("log.segment.bytes", str(size), incremental_operation=AlterConfigOpType.SET)
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result(60)
    create_topic(cluster, "events", 1, {"retention.ms": "-1"}, replica_assignment=[[1, 2, 3]])
    produce(cluster, "events", 3500, 1000)
    cluster_file, manifests = write_setup(tmp_path, cluster, {"events": {"localRetentionMs": -1}})
    clock = Clock()
    runner = Standalone(load_clusters([cluster_file]), load_manifests(manifests), clock=clock)

    runner.run_round()
    first = runner.topic_status["t/events"]
    assert first.last_copy is not None and first.last_copy.result == "Succeeded", first
    assert first.remote is not None
    tiered_end = first.remote.partitions[0].end_offset
    assert tiered_end is not None and first.remote.segments >= 3

    cluster.stop_broker(1)  # broker 2 (next in the assignment and in sync) takes over
    produce(cluster, "events", 2500, 1000, start=3500)
    # The round asks whichever broker its client picks; until every running broker's own metadata names
    # the new leader, a stale answer would plan the copy from broker 1's (stopped) log dir.
    wait_for_leader_everywhere(cluster, "events", 0, 2)
    # The first round after the stop may find its client still waiting on the stopped broker (librdkafka
    # keeps the controller its metadata named: "Failed while waiting for controller"); such a round reports
    # the error and the next asks with a fresh client. A few rounds, not a time window.
    for _ in range(4):
        clock.now += datetime.timedelta(hours=1)
        runner.run_round()
        second = runner.topic_status["t/events"]
        done = second.remote is not None and (second.remote.partitions[0].end_offset or 0) > tiered_end + 1000
        if done and second.last_copy is not None:
            break
    assert second.last_copy is not None and second.last_copy.result == "Succeeded", second
    assert second.remote is not None
    later_end = second.remote.partitions[0].end_offset
    assert later_end is not None and later_end > tiered_end + 1000, (
        second,
        runner.broker_status,
        sorted(os.listdir(tmp_path / "remote")),
    )
    assert runner.broker_status["t/broker-2"].last_copy is not None

    store = RemoteStore(f"file://{tmp_path / 'remote'}")
    with RemoteReader(store) as reader:
        segments = reader.manifest(reader.resolve("events", 0), refresh=True).segments
    # Broker 1 rolled every 1,024 records (1 MiB), broker 2 every ~1,536: the tier holds both, and the
    # new leader's first segment started before what was tiered, at a boundary broker 1 never had.
    assert {s.broker_id for s in segments} == {1, 2}
    assert any(s.broker_id == 2 and s.next_offset % 1024 for s in segments), segments
    offsets = remote_offsets(tmp_path / "remote", "events", 0)
    assert offsets[0] == 0
    missing = sorted(set(range(later_end + 1)) - set(offsets))
    assert missing == [], f"gap in the remote tier at {missing[:5]}"
    twice = len(offsets) - len(set(offsets))
    assert twice == 0, f"{twice} records are served twice"


def test_standalone_runs_the_jobs_requests_its_topics_copy_interval_and_the_clusters_rate(
    kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    """Standalone mode runs the same requests as the operator's Jobs (storage_core.reconcile.requests):
    - the cleanup judges the local trim with the topic's own copy interval, as the planner did. Kafka's
      retention.ms of 75 min leaves room for a 10 min interval + the 1 h margin, not for the default
      1 h one; judged with the default, the trim was refused and the topic Stalled on CleanupFailed;
    - the copy is held to the cluster's jobs.maxBytesPerSecond."""
    import uuid

    topic = f"interval-{uuid.uuid4().hex[:8]}"
    create_topic(
        kafka_broker, topic, 1, {"internal.segment.bytes": str(64 * 1024), "retention.ms": "4500000"}
    )
    produce(kafka_broker, topic, 1500, 300)
    rate = 64 * 1024
    cluster_file, manifests = write_setup(
        tmp_path, kafka_broker, {topic: {"localRetentionMs": 0, "copy": {"intervalSeconds": 600}}}
    )
    config = yaml.safe_load(cluster_file.read_text())
    cluster_file.write_text(yaml.safe_dump({**config, "jobs": {"maxBytesPerSecond": rate}}))
    runner = Standalone(load_clusters([cluster_file]), load_manifests(manifests))
    started = time.monotonic()
    runner.run_round()
    elapsed = time.monotonic() - started

    status = runner.topic_status[f"t/{topic}"]
    assert status.last_copy is not None and status.last_copy.result == "Succeeded", status
    assert status.last_cleanup is not None, status
    assert status.last_cleanup.result == "Succeeded", status.last_cleanup.message
    assert {c.type: c.status for c in status.conditions} == {"Ready": "True"}, status.conditions
    assert status.remote is not None
    tiered = status.remote.bytes
    (part,) = status.remote.partitions
    start = KafkaAdmin(kafka_broker.bootstrap_servers).log_start_offsets([(topic, 0)])[(topic, 0)]
    assert 0 < start <= part.end_offset + 1  # trimmed, behind the tier
    # One second's worth goes at once; the rest at the cluster's rate.
    assert tiered > 3 * rate, tiered
    assert elapsed >= (tiered - rate) / rate * 0.95, (elapsed, tiered)


def test_standalone_trim_waits_for_groups_that_read_the_brokers_directly(
    kafka_cluster_factory: Callable[..., KafkaCluster], tmp_path: Path
) -> None:
    cluster = kafka_cluster_factory(3)
    config = {"internal.segment.bytes": str(64 * 1024), "retention.ms": "-1"}
    create_topic(cluster, "payments", 3, config, replication_factor=3)
    produce(cluster, "payments", 3000, 300)
    # Two groups that read the brokers directly committed low on every partition, then stopped.
    for group, offset in (("audit", 50), ("billing", 80)):
        committer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
        committer.commit(
            offsets=[TopicPartition("payments", p, offset) for p in range(3)], asynchronous=False
        )
        committer.close()
    cluster_file, manifests = write_setup(
        tmp_path, cluster, {"payments": {"localRetentionBytes": 128 * 1024}}
    )
    proc = subprocess.run(
        [sys.executable, "-m", "storage_core.cli", "standalone", "--cluster", str(cluster_file),
         "--manifests", str(manifests), "--once", "--json"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    payments = json.loads(proc.stdout)["tieredTopics"]["t/payments"]
    assert payments["lastCleanup"]["result"] == "Succeeded", payments
    admin = KafkaAdmin(cluster.bootstrap_servers)
    keys = [("payments", p) for p in range(3)]
    assert set(admin.log_start_offsets(keys).values()) == {50}, "held at the lowest direct commit"
    dry = subprocess.run(
        [sys.executable, "-m", "storage_core.cli", "cleanup", "--remote", f"file://{tmp_path / 'remote'}",
         "--bootstrap-servers", cluster.bootstrap_servers, "--topic", "payments",
         "--local-retention-bytes", str(128 * 1024), "--dry-run", "--json"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
    )  # fmt: skip
    for part in json.loads(dry.stdout)["partitions"]:
        held = part["trim_hold"]
        assert held["window_to"] > 50 and held["to"] is None, held  # the window alone trims further
        assert held["held_by"] == [{"group": "audit", "offset": 50}, {"group": "billing", "offset": 80}]

    # The group resumes with Kafka's default auto.offset.reset=latest and misses nothing.
    highs = admin.high_watermarks(keys)
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "audit", "auto.offset.reset": "latest"}
    )
    consumer.subscribe(["payments"])
    got: dict[int, list[int]] = {p: [] for p in range(3)}
    deadline = time.monotonic() + 120
    try:
        while any(len(got[p]) < highs[("payments", p)] - 50 for p in got) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got[msg.partition()].append(msg.offset())
    finally:
        consumer.close()
    assert got == {p: list(range(50, highs[("payments", p)])) for p in range(3)}
