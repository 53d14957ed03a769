"""A tiered topic with timestamps spread over hours, on the session broker."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.store import RemoteStore
from storage_core.remote.metadata import SegmentMetadata
from storage_core.remote.reader import RemoteReader

RECORDS = 3000
STEP_MS = 10_000


@dataclass
class TieredTopic:
    topic: str
    bootstrap: str
    log_dir: Path
    baseline: Path
    """A remote tier holding the topic, copied fresh into each test (``fresh_remote``)."""
    produced_at_ms: int

    def fresh_remote(self, target: Path) -> Path:
        shutil.copytree(self.baseline, target)
        return target

    def cleanup(
        self, remote: Path, *flags: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``tierkeeper cleanup --json`` of this topic on the file tier ``remote``."""
        return run_cli(
            "cleanup",
            "--remote",
            f"file://{remote}",
            "--bootstrap-servers",
            self.bootstrap,
            "--topic",
            self.topic,
            *flags,
            "--json",
            env=env,
        )

    def segments(self, remote: Path) -> list[SegmentMetadata]:
        with RemoteReader(RemoteStore(f"file://{remote}")) as reader:
            return reader.manifest(reader.resolve(self.topic, 0), refresh=True).segments


def make_topic(cluster: KafkaCluster, name: str, tmp: Path) -> TieredTopic:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics(
        [NewTopic(name, 1, 1, config={"internal.segment.bytes": "65536", "retention.ms": "-1"})]
    )[name].result(60)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "enable.idempotence": True,
            "batch.size": 16384,
            "linger.ms": 5,
        }
    )
    now = int(time.time() * 1000)
    errors: list[object] = []
    for i in range(RECORDS):
        # Oldest first, one record every 10 s of the past 8+ hours: retention by time has a clear answer.
        producer.produce(
            name,
            value=f"{i:06d}".encode() * 30,
            key=str(i).encode(),
            partition=0,
            timestamp=now - (RECORDS - i) * STEP_MS,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert producer.flush(60) == 0 and errors == []
    baseline = tmp / "baseline"
    proc = run_cli(
        "copy",
        "--log-dir",
        str(cluster.log_dir(1)),
        "--topic",
        name,
        "--bootstrap-servers",
        cluster.bootstrap_servers,
        "--remote",
        f"file://{baseline}",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["copied_segments"] >= 8
    return TieredTopic(name, cluster.bootstrap_servers, cluster.log_dir(1), baseline, now)


@pytest.fixture(scope="module")
def tiered_topic(kafka_broker: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> TieredTopic:
    return make_topic(kafka_broker, "retention-topic", tmp_path_factory.mktemp("retention"))
