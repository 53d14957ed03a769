"""SIGKILL during copies to S3 whose segments go up as multipart uploads (moto, real Kafka segments).

The file:// kill test (test_copy_failures.py) covers the copy's steps; here the segments are larger than
one upload part, and half of the kills land just after a part was sent, while a multipart upload is open
(only S3 has those), the other half at the steps of a segment's copy. Every kill is at a named fault
point (storage_core/faults.py), so where it lands does not depend on the machine's speed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from storage_core.adapters.store import RemoteStore
from storage_core.faults import ENV
from storage_core.logdir import LogDir

from .conftest import run_cli, s3_remote
from .private_logdir import copy_partitions
from .tier_checks import finished_segments_complete, open_uploads, read_offsets

SEGMENT_BYTES = 12 << 20  # one segment = two 8 MiB upload parts


def _produce_big_topic(kafka: KafkaCluster) -> str:
    topic = f"big-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    config = {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(60)
    kafka.wait_topic(topic, 1)
    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "none",
        }
    )
    value = os.urandom(10_000)
    for i in range(4_000):  # ~40 MB: three rolled segments and the active one
        producer.produce(topic, key=str(i).encode(), value=value[i % 100 :] + value[: i % 100])
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return topic


def test_sigkill_inside_multipart_uploads_leaves_nothing_readable_and_cleanup_aborts_the_rest(
    kafka_broker: KafkaCluster, moto_server: MotoServer, s3_bucket: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    topic = _produce_big_topic(kafka_broker)
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    bases = [s.base_offset for s in LogDir(log_dir).partitions({topic})[0].segments()]
    rolled, active_base = bases[:-1], bases[-1]
    kafka = ["--bootstrap-servers", kafka_broker.bootstrap_servers]
    assert len(rolled) >= 3, "the test needs several segments larger than one upload part"
    url, options = s3_bucket

    def start(remote: Any, fault: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "storage_core.cli",
                "copy",
                "--log-dir",
                str(log_dir),
                *kafka,
                *remote.flags,
            ],
            env={**os.environ, **remote.env, ENV: fault},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    # Each trial kills the copier at a named point (storage_core/faults.py) on its n-th pass: half of them
    # just after a part of a multipart upload was sent (an upload is open by construction), the others
    # at the steps of a segment's copy.
    trials = [
        ("copy.part.sent", 1),
        ("copy.segment.finished", 1),
        ("copy.part.sent", 2),
        ("copy.log.stored", 2),
        ("copy.part.sent", 3),
        ("copy.segment.started", 3),
        ("copy.part.sent", 4),
        ("copy.segment.finished", 2),
    ]
    for trial, (point, n) in enumerate(trials):
        remote = s3_remote(moto_server, f"{url}/tier-{trial}", options)
        store = RemoteStore(remote.url, options)
        copier = start(remote, f"{point}:{n}")
        assert copier.wait(120) == -signal.SIGKILL, f"{point}:{n}: the kill must land"
        store.invalidate()
        if point == "copy.part.sent":
            assert open_uploads(store, store.root), f"{point}:{n}: the kill leaves an upload open"
        finished = (
            finished_segments_complete(store, log_dir).get((topic, 0), []) if store.exists(store.root) else []
        )
        assert finished == rolled[: len(finished)], "finished segments must be a gap-free prefix"
        if finished:
            offsets = read_offsets(store, topic, 0)
            assert offsets == list(range(len(offsets))), "every readable offset once, in order"

        rerun = run_cli("copy", "--log-dir", str(log_dir), *kafka, *remote.flags, env=remote.env)
        assert rerun.returncode == 0, rerun.stderr
        store.invalidate()
        assert finished_segments_complete(store, log_dir)[(topic, 0)] == rolled
        assert read_offsets(store, topic, 0) == list(range(active_base))

        swept = run_cli("cleanup", *remote.flags, "--orphan-grace-ms", "0", "--json", env=remote.env)
        assert swept.returncode == 0, swept.stderr
        assert open_uploads(store, store.root) == [], "the sweep aborts what the kill left open"
        assert finished_segments_complete(store, log_dir)[(topic, 0)] == rolled, (
            "the sweep never touches finished segments"
        )
