"""The source on a real Spark cluster, not local mode (issue 31, item 5): a standalone master and two
workers started from the installed pyspark's own launcher on loopback (harness.spark_cluster), a driver
of its own (``cluster_driver``: one SparkContext per process) reading the tier as a batch DataFrame and
a ``continueFromKafka`` stream (Trigger.AvailableNow) from the tier into the session broker's tail.

The executors are separate JVMs, one per worker, each in its worker's work dir; their Python workers run
the interpreter ``spark.pyspark.python`` names (here a wrapper that notes the directory it starts in and
runs the venv's Python), so both workers' executors are seen running the source's Python. What they read
equals a direct consumer of the broker, offset for offset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from storage.dataset import Dataset, consume

from harness.kafka import KafkaCluster
from harness.paths import REPO_ROOT
from harness.spark_cluster import SparkStandalone

from .test_spark_hybrid import _direct, _hybrid_options, _produce_transactions, _tiered

WORKERS = 2


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    cluster = SparkStandalone(tmp_path_factory.mktemp("spark-cluster"), workers=WORKERS)
    started = time.monotonic()
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        print(f"spark standalone cluster: {time.monotonic() - started:.1f} s from start to stop")


def _noting_python(path: Path, log: Path) -> Path:
    """An interpreter for the workers: notes the directory it starts in, then runs this venv's Python."""
    path.write_text(f'#!/bin/sh\necho "$PWD" >> "{log}"\nexec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


def _parquet_rows(path: Path) -> list[tuple[int, int, bytes, bytes]]:
    table = pq.read_table(path)
    return sorted(
        zip(
            table["partition"].to_pylist(),
            table["offset"].to_pylist(),
            [k or b"" for k in table["key"].to_pylist()],
            [v or b"" for v in table["value"].to_pylist()],
        )
    )


def test_the_source_and_a_continue_from_kafka_stream_run_on_a_standalone_clusters_executors(
    spark_cluster: SparkStandalone, spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    bootstrap = spark_dataset.bootstrap
    topic = f"cluster-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"internal.segment.bytes": "32768", "retention.ms": "-1"}
    admin.create_topics([NewTopic(topic, 2, 1, config=config)])[topic].result(60)
    _produce_transactions(bootstrap, topic, 0, 1500)
    tier = _tiered(spark_dataset, kafka_broker, topic, tmp_path)
    ends = {p: tier.remote_end(topic, p) for p in (0, 1)}
    launches = tmp_path / "python-starts.log"

    hybrid = _hybrid_options(tier, topic, bootstrap)
    spec = {
        "master": spark_cluster.master_url,
        "workers": WORKERS,
        "python": str(_noting_python(tmp_path / "python.sh", launches)),
        "out": str(tmp_path / "out"),
        "batch": {"remote": tier.url, "topic": topic, "kafka.isolation.level": "read_committed"},
        "stream": {**hybrid, "startingOffsets": "earliest"},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "driver").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "tests"), "PYSPARK_PYTHON": spec["python"]}
    proc = subprocess.run(
        [sys.executable, "-m", "spark.cluster_driver", str(tmp_path / "spec.json")],
        cwd=tmp_path / "driver",
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    app_id = json.loads(proc.stdout.strip().splitlines()[-1])["app_id"]
    assert app_id.startswith("app-"), app_id  # a standalone application, not local-<n>

    # The batch read: the tier alone; the stream: the tier, then the brokers' tail, every offset once.
    tiered = sorted(
        (p, e.offset, e.key or b"", e.value or b"")
        for p in (0, 1)
        for e in consume(bootstrap, topic, p, "read_committed", until_offset=ends[p])
    )
    assert _parquet_rows(tmp_path / "out" / "batch") == tiered
    streamed = _parquet_rows(tmp_path / "out" / "stream")
    assert len(streamed) == len(set(streamed)), "an offset was written twice"
    assert streamed == _direct(bootstrap, topic, "read_committed")
    assert max(o for p, o, _, _ in streamed if p == 0) > ends[0], "nothing read from the brokers' tail"

    # Each worker ran an executor of the application (a JVM of its own, in its work dir), and the
    # source's Python ran there, not in the driver's directory.
    starts = set(launches.read_text().split())
    for n in range(WORKERS):
        app_dir = spark_cluster.work_dir(n) / app_id
        executors = [d for d in app_dir.iterdir() if (d / "stderr").exists()] if app_dir.exists() else []
        assert executors, f"worker {n} ran no executor of {app_id}"
        assert any(s.startswith(str(app_dir)) for s in starts), (n, starts)
    assert str(tmp_path / "driver") in starts, "the driver's planner Python was not seen"
