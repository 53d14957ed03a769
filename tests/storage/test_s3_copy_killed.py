"""SIGKILL during copies to S3 whose segments go up as multipart uploads (moto, real Kafka segments).

The file:// kill test (test_copy_failures.py) covers 24 trials; here the segments are larger than one
upload part, and half of the kills are aimed at the moment a multipart upload is open (only S3 has
those), the other half land at random points of the copy.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from storage_core.adapters.store import RemoteStore
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


def _wait_for_first_object(store: RemoteStore, proc: subprocess.Popen[bytes]) -> float:
    """Wait until the copier has written its first object (its start-up is over); return that time."""
    deadline = time.monotonic() + 60
    while True:
        store.invalidate()
        if store.fs.exists(store.root) and store.fs.find(store.root):
            return time.monotonic()
        assert proc.poll() is None, "the copier exited before writing anything"
        assert time.monotonic() < deadline, "the copier wrote nothing in 60 s"
        time.sleep(0.02)


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

    def start(remote: Any) -> subprocess.Popen[bytes]:
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
            env={**os.environ, **remote.env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    calibration = s3_remote(moto_server, f"{url}/calibrate", options)
    copier = start(calibration)
    began = _wait_for_first_object(RemoteStore(calibration.url, options), copier)
    assert copier.wait(120) == 0
    duration = time.monotonic() - began

    rng = random.Random(405)
    killed_inside_uploads = 0
    for trial in range(8):
        remote = s3_remote(moto_server, f"{url}/tier-{trial}", options)
        store = RemoteStore(remote.url, options)
        copier = start(remote)
        _wait_for_first_object(store, copier)
        if trial % 2:
            time.sleep(rng.uniform(0.0, 1.0) * duration)
        else:  # aimed: kill as soon as a multipart upload is open
            while not open_uploads(store, store.root) and copier.poll() is None:
                time.sleep(0.005)
        copier.kill()
        copier.wait(30)
        store.invalidate()
        if open_uploads(store, store.root):
            killed_inside_uploads += 1
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
    assert killed_inside_uploads >= 3, (
        f"only {killed_inside_uploads} of 8 kills landed inside multipart uploads"
    )
