"""A JBOD broker (two entries in log.dirs) of a real 3-broker cluster: a topic whose partitions Kafka spread
over both dirs is tiered from both, trimmed, and broker 3 is rebuilt into both dirs and catches up.

One cluster for the module, every broker with two log dirs. References: Kafka's Admin API, the brokers' own
files and server log.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.formats.segment_files import parse_partition_dir_name
from storage_core.jobs.rebuild import dir_index

from .real import REBUILT, create_topic, log_end, produce, run_cli, server_log_since_last_start

pytestmark = pytest.mark.kafka

TOPIC = "spread"
PARTITIONS = 4
WINDOW = 200_000


def partition_dirs(log_dir: Path) -> set[str]:
    return {d.name for d in log_dir.iterdir() if d.is_dir() and parse_partition_dir_name(d.name)}


def dir_args(cluster: KafkaCluster, node: int) -> list[str]:
    return [arg for d in cluster.log_dirs(node) for arg in ("--log-dir", str(d))]


def cli_json(*args: str) -> dict[str, Any]:
    proc = run_cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    kafka = KafkaCluster(tmp_path_factory.mktemp("jbod-kafka"), brokers=3, log_dirs_per_broker=2)
    try:
        yield kafka.start()
    finally:
        kafka.stop()


@pytest.fixture(scope="module")
def remote(cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    create_topic(cluster, TOPIC, PARTITIONS, {"local.retention.bytes": str(WINDOW)})
    produce(cluster, TOPIC, PARTITIONS, 400_000, seed=7)
    return f"file://{tmp_path_factory.mktemp('jbod-remote')}"


def test_a_jbod_broker_is_tiered_trimmed_and_rebuilt(cluster: KafkaCluster, remote: str) -> None:
    first, second = cluster.log_dirs(1)
    in_first, in_second = partition_dirs(first), partition_dirs(second)
    assert in_first & in_second == set()
    wanted = {f"{TOPIC}-{p}" for p in range(PARTITIONS)}
    assert wanted <= in_first | in_second
    assert wanted & in_first and wanted & in_second, "Kafka put the topic's partitions in one dir only"

    # Tiered from both dirs of broker 1: each partition read where Kafka keeps it.
    copied = cli_json(
        "copy", *dir_args(cluster, 1), "--topic", TOPIC, "--bootstrap-servers", cluster.bootstrap_servers,
        "--remote", remote,
    )  # fmt: skip
    assert copied["failed_partitions"] == 0
    rows = {r["partition"]: r for r in copied["partitions"]}
    assert sorted(rows) == list(range(PARTITIONS))
    assert all(r["copied_segments"] > 0 for r in rows.values()), rows
    # One dir alone: the partitions of the other are named as missing, the others copied (nothing new).
    only_first = run_cli(
        "copy", "--log-dir", str(first), "--topic", TOPIC, "--bootstrap-servers", cluster.bootstrap_servers,
        "--remote", remote, "--json",
    )  # fmt: skip
    one = json.loads(only_first.stdout)
    assert {r["partition"] for r in one["partitions"]} == {
        int(n.rsplit("-", 1)[1]) for n in wanted & in_first
    }
    assert one["failed_partitions"] == 0 and one["copied_segments"] == 0

    # Trimmed to the local window through Kafka, counting the untiered bytes of both dirs.
    admin = KafkaAdmin(cluster.bootstrap_servers)
    keys = [(TOPIC, p) for p in range(PARTITIONS)]
    trimmed = cli_json(
        "cleanup", "--topic", TOPIC, "--bootstrap-servers", cluster.bootstrap_servers, "--remote", remote,
        "--local-retention-bytes", str(WINDOW), *dir_args(cluster, 1),
    )  # fmt: skip
    starts = admin.log_start_offsets(keys)
    assert all(starts[k] > 0 for k in keys), (starts, trimmed)
    tiered_ends = {r["partition"]: r["remote_end_offset"] for r in rows.values()}
    assert all(starts[(TOPIC, p)] <= tiered_ends[p] + 1 for p in range(PARTITIONS))

    # Broker 3 replaced: both disks empty but for what formatting leaves; rebuilt into both.
    cluster.stop_broker(REBUILT)
    cluster.wipe_log_dir(REBUILT)
    dirs = cluster.log_dirs(REBUILT)
    summary = cli_json(
        "rebuild", *dir_args(cluster, REBUILT), "--bootstrap-servers", cluster.bootstrap_servers,
        "--broker-id", str(REBUILT), "--remote", remote,
    )  # fmt: skip
    assert summary["action"] == "rebuilt", summary
    assert summary["log_dir"] == ", ".join(map(str, dirs))
    restored = {(p["topic"], p["partition"]) for p in summary["partitions"] if p["segments"]}
    assert restored == set(keys), summary
    for i, log_dir in enumerate(dirs):
        expected = {f"{TOPIC}-{p}" for p in range(PARTITIONS) if dir_index(TOPIC, p, len(dirs)) == i}
        assert partition_dirs(log_dir) >= expected
        assert partition_dirs(log_dir) & {f"{TOPIC}-{p}" for p in range(PARTITIONS)} == expected
    # Done once: a second run says so for both dirs.
    again = cli_json(
        "rebuild", *dir_args(cluster, REBUILT), "--bootstrap-servers", cluster.bootstrap_servers,
        "--broker-id", str(REBUILT), "--remote", remote, "--dry-run",
    )  # fmt: skip
    assert again["action"] == "already-rebuilt"
    restored_files = {
        (log_dir.name, name): {f.name for f in (log_dir / name).glob("*.log")}
        for log_dir in dirs
        for name in partition_dirs(log_dir)
    }

    cluster.start_broker(REBUILT)
    produce(cluster, TOPIC, PARTITIONS, 50_000, seed=8)  # new records reach the rebuilt broker too
    deadline = time.monotonic() + 180
    while True:
        described = admin.describe([TOPIC])
        ends = admin.high_watermarks(list(described))
        mine = {}
        for t, p in described:
            holder = next((d for d in dirs if (d / f"{t}-{p}").is_dir()), None)
            mine[(t, p)] = log_end(holder / f"{t}-{p}") if holder else -1
        if all(REBUILT in info.isr for info in described.values()) and mine == ends:
            break
        assert time.monotonic() < deadline, f"broker {REBUILT} not in sync: {described}, {mine} vs {ends}"
        time.sleep(0.5)
    # Kafka kept each partition in the dir the rebuild put it in, with the restored segments (a replica
    # Kafka had thrown away and fetched again would have lost them).
    for (dir_name, name), files in restored_files.items():
        log_dir = next(d for d in dirs if d.name == dir_name)
        assert files <= {f.name for f in (log_dir / name).glob("*.log")}, (log_dir, name)
        other = next(d for d in dirs if d != log_dir)
        assert not (other / name).exists()
    log = server_log_since_last_start(cluster, REBUILT)
    assert "Duplicate log directories" not in log
    starts_after = admin.log_start_offsets(keys)
    assert all(starts_after[k] >= starts[k] for k in keys)
