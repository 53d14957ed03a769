"""Helpers of the real-cluster rebuild tests: data, the CLI, and what a broker's files say."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.formats.producer_snapshot import ProducerEntry, parse_producer_snapshot
from storage_core.formats.record_batch import TruncatedTailError, iter_batch_headers
from storage_core.formats.source import bytes_fetcher
from storage_core.rebuild.state import META, META_ASIDE

SEGMENT_BYTES = 65536
REBUILT = 3


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storage_core.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cli_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "storage_core.cli", *args]


def rebuild_args(cluster: KafkaCluster, remote: str, *extra: str) -> tuple[str, ...]:
    """The ``tierkeeper rebuild --json`` arguments that rebuild broker REBUILT's log dir from ``remote``."""
    return (
        "rebuild",
        "--log-dir",
        str(cluster.log_dir(REBUILT)),
        "--bootstrap-servers",
        cluster.bootstrap_servers,
        "--broker-id",
        str(REBUILT),
        "--remote",
        remote,
        "--json",
        *extra,
    )


def rebuild_json(cluster: KafkaCluster, remote: str, *extra: str) -> dict[str, Any]:
    proc = run_cli(*rebuild_args(cluster, remote, *extra))
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def create_topic(
    cluster: KafkaCluster, topic: str, partitions: int, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    cfg = {"internal.segment.bytes": str(SEGMENT_BYTES), **(config or {})}
    for fut in admin.create_topics([NewTopic(topic, partitions, 3, config=cfg)]).values():
        fut.result(60)
    cluster.wait_topic(topic, partitions)


def produce(
    cluster: KafkaCluster,
    topic: str,
    partitions: int,
    bytes_per_partition: int,
    *,
    seed: int,
    idempotent: bool = True,
) -> None:
    rng = random.Random(seed)
    errors: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "enable.idempotence": idempotent,
            "linger.ms": 5,
            "batch.size": 16384,
            "acks": "all",
        }
    )
    for p in range(partitions):
        sent = 0
        while sent < bytes_per_partition:
            value = rng.randbytes(rng.randint(100, 400))
            while True:
                try:
                    producer.produce(
                        topic,
                        value=value,
                        partition=p,
                        on_delivery=lambda err, _m: errors.append(err) if err else None,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += len(value)
    assert producer.flush(120) == 0
    assert errors == [], errors[:3]


def produce_transactions(cluster: KafkaCluster, topic: str, count: int, *, seed: int) -> None:
    """``count`` transactions of 40 records on partition 0, every third aborted."""
    rng = random.Random(seed)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "transactional.id": f"{topic}-{seed}",
            "linger.ms": 5,
            "batch.size": 16384,
        }
    )
    producer.init_transactions(60)
    for t in range(count):
        producer.begin_transaction()
        for _ in range(40):
            producer.produce(topic, value=rng.randbytes(rng.randint(100, 300)), partition=0)
        assert producer.flush(60) == 0  # all delivered before an abort (librdkafka #4849)
        (producer.abort_transaction if t % 3 == 2 else producer.commit_transaction)(60)


def tier(cluster: KafkaCluster, remote: str, *topics: str) -> dict[str, Any]:
    """``tierkeeper copy`` of broker 1's log dir (any replica's dir will do)."""
    args = [a for t in topics for a in ("--topic", t)]
    proc = run_cli(
        "copy",
        "--log-dir",
        str(cluster.log_dir(1)),
        "--bootstrap-servers",
        cluster.bootstrap_servers,
        "--remote",
        remote,
        "--json",
        *args,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    assert out["failed_partitions"] == 0
    return out


# ---- broker files ---------------------------------------------------------------------------------
def log_files(pdir: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(pdir.glob("*.log"))}


def batches_from(pdir: Path, offset: int) -> tuple[int, int]:
    """(bytes, next offset) of the batches at or after ``offset`` in a partition dir's segments."""
    size = 0
    end = offset
    for f in sorted(pdir.glob("*.log")):
        data = f.read_bytes()
        for _, header in iter_batch_headers(bytes_fetcher(data), size=len(data), path=str(f)):
            if header.base_offset >= offset:
                size += header.size_in_bytes
                end = max(end, header.last_offset + 1)
    return size, end


def log_end(pdir: Path) -> int:
    return batches_from(pdir, 0)[1]


def snapshot_entries(path: Path) -> list[ProducerEntry]:
    return sorted(parse_producer_snapshot(path.read_bytes(), path=str(path)), key=lambda e: e.producer_id)


def server_log_since_last_start(cluster: KafkaCluster, node: int) -> str:
    return cluster.server_log(node).rsplit(f"===== harness: starting node {node}", 1)[-1]


# ---- cluster states -------------------------------------------------------------------------------
def stop_and_wipe(cluster: KafkaCluster) -> None:
    """Broker 3 stopped with a log dir as a replaced disk formatted for it holds: meta.properties only."""
    cluster.stop_broker(REBUILT)
    data = cluster.log_dir(REBUILT)
    if (data / META_ASIDE).exists() and not (data / META).exists():
        os.rename(data / META_ASIDE, data / META)
    cluster.wipe_log_dir(REBUILT)


def wait_in_sync(cluster: KafkaCluster, topics: list[str], timeout: float = 180) -> float:
    """Seconds until broker 3 is in the ISR of every partition of ``topics`` and its log ends where the
    leader's does."""
    admin = KafkaAdmin(cluster.bootstrap_servers)
    start = time.monotonic()
    while True:
        described = admin.describe(topics)
        ends = admin.high_watermarks(list(described))
        in_isr = all(REBUILT in info.isr for info in described.values())
        mine = {(t, p): _safe_log_end(cluster.log_dir(REBUILT) / f"{t}-{p}") for t, p in described}
        if in_isr and mine == ends:
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, (
            f"broker {REBUILT} not in sync: {described}, ends {mine} vs {ends}"
        )
        time.sleep(0.3)


def _safe_log_end(pdir: Path) -> int:
    try:
        return log_end(pdir)
    except (TruncatedTailError, FileNotFoundError):  # a batch or a segment being written right now
        return -1


@dataclass
class Tiered:
    remote: str
    topics: list[str]
    windowed_topic: str
    window_bytes: int
    partitions: dict[str, int] = field(default_factory=dict)
