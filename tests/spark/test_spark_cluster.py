"""The source and the Spark jobs on a real Spark cluster, not local mode (issue 31, item 5): a standalone
master and two workers started from the installed pyspark's own launcher on loopback
(harness.spark_cluster), this venv not on their PATH, and executors whose Python comes the way a user
ships it: a packed virtualenv (``harness.spark_env``: Tierkeeper and its dependencies, pyspark left to
the workers' Spark) given as ``spark.archives=env.tar.gz#env`` with ``./env/bin/python`` as the workers'
interpreter. The workers' ``python3`` and the base Python have no pyarrow, so an executor that reads the
tier got pyarrow and Tierkeeper from the archive; each executor reports where they came from.

- A driver of its own (``cluster_driver``: one SparkContext per process) reads the tier as a batch
  DataFrame and a ``continueFromKafka`` stream (Trigger.AvailableNow) from the tier into the session
  broker's tail: what it read equals a direct consumer of the broker, offset for offset.
- The CLI's Spark jobs with ``--spark-master spark://...``, the executors' Python named by ``--spark-conf
  spark.pyspark.python`` over an inherited PYSPARK_PYTHON without pyarrow: ``export`` (the exported rows
  equal a consumer's), ``recover --engine spark`` (the restored topic holds the tiered history) and
  ``cleanup --engine spark`` (deletes exactly what the in-process cleanup deletes from an identical copy
  of the tier). ``copy --engine spark`` reads its node's log dir and is local by design
  (``local[parallelism]``), so it has no cluster run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from recovery.history import consume as consume_all
from recovery.history import delete_topic
from storage.dataset import Dataset, consume

from harness import spark_env
from harness.kafka import KafkaCluster
from harness.paths import REPO_ROOT
from harness.spark_cluster import SparkStandalone
from harness.tierkeeper_cli import run_cli

from .conftest import Tier
from .test_spark_export import Target, _exported
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


@pytest.fixture(scope="module")
def shipped_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packed environment, and the check that nothing else on the workers could stand in for it."""
    where = tmp_path_factory.mktemp("shipped-env")
    started = time.monotonic()
    archive = spark_env.build(where / "env.tar.gz", where)
    print(f"shipped env: {archive.stat().st_size >> 20} MiB packed in {time.monotonic() - started:.1f} s")
    base = subprocess.run([spark_env.base_python(), "-c", "import pyarrow"], capture_output=True, timeout=120)
    assert base.returncode != 0, "the base Python has pyarrow: the test could not tell the archive was used"
    return archive


def _workers_python3_lacks_pyarrow(cluster: SparkStandalone) -> None:
    env = cluster.env()
    python3 = shutil.which("python3", path=env["PATH"])
    if python3 is not None:
        proc = subprocess.run([python3, "-c", "import pyarrow"], env=env, capture_output=True, timeout=120)
        assert proc.returncode != 0, f"{python3} on the workers' PATH has pyarrow"


def _from_archive(probed: list[dict[str, str]], cluster: SparkStandalone) -> None:
    """Each executor's Python was the archive's, unpacked in its own directory, with pyarrow and Tierkeeper
    from there; and both workers' executors ran."""
    for seen in probed:
        env = f"{seen['cwd']}/env/"
        assert seen["python"] == f"{env}bin/python", seen
        assert seen["pyarrow"].startswith(env) and seen["storage_core"].startswith(env), seen
    ran_on = {
        n for n in range(WORKERS) for seen in probed if seen["cwd"].startswith(f"{cluster.work_dir(n)}/")
    }
    assert ran_on == set(range(WORKERS)), probed


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


def _history(data: Dataset, broker: KafkaCluster, tmp_path: Path) -> tuple[str, Tier, dict[int, int]]:
    """A topic of 2 partitions with committed and aborted transactions, tiered but for its active
    segments; returns it, its tier and each partition's last tiered offset."""
    topic = f"cluster-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": data.bootstrap})
    config = {"internal.segment.bytes": "32768", "retention.ms": "-1"}
    admin.create_topics([NewTopic(topic, 2, 1, config=config)])[topic].result(60)
    _produce_transactions(data.bootstrap, topic, 0, 1500)
    tier = _tiered(data, broker, topic, tmp_path)
    return topic, tier, {p: tier.remote_end(topic, p) for p in (0, 1)}


def _tiered_rows(bootstrap: str, topic: str, ends: dict[int, int]) -> list[tuple[int, int, bytes, bytes]]:
    return sorted(
        (p, e.offset, e.key or b"", e.value or b"")
        for p in ends
        for e in consume(bootstrap, topic, p, "read_committed", until_offset=ends[p])
    )


def test_the_source_and_a_continue_from_kafka_stream_run_on_executors_with_a_shipped_environment(
    spark_cluster: SparkStandalone,
    shipped_env: Path,
    spark_dataset: Dataset,
    kafka_broker: KafkaCluster,
    tmp_path: Path,
) -> None:
    _workers_python3_lacks_pyarrow(spark_cluster)
    bootstrap = spark_dataset.bootstrap
    topic, tier, ends = _history(spark_dataset, kafka_broker, tmp_path)
    spec = {
        "master": spark_cluster.master_url,
        "workers": WORKERS,
        "python": "./env/bin/python",
        "conf": {"spark.archives": f"{shipped_env}#env"},
        "out": str(tmp_path / "out"),
        "batch": {"remote": tier.url, "topic": topic, "kafka.isolation.level": "read_committed"},
        "stream": {**_hybrid_options(tier, topic, bootstrap), "startingOffsets": "earliest"},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    # Client mode: the driver plans the data source's reads with the same ./env/bin/python, in its own
    # working directory, where the environment the archive was packed from is linked (README).
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "env").symlink_to(sys.prefix)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "tests"), "PYSPARK_PYTHON": spec["python"]}
    proc = subprocess.run(
        [sys.executable, "-m", "spark.cluster_driver", str(tmp_path / "spec.json")],
        cwd=driver,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said["app_id"].startswith("app-"), said  # a standalone application, not local-<n>
    _from_archive(said["probed"], spark_cluster)

    # The batch read: the tier alone; the stream: the tier, then the brokers' tail, every offset once.
    assert _parquet_rows(tmp_path / "out" / "batch") == _tiered_rows(bootstrap, topic, ends)
    streamed = _parquet_rows(tmp_path / "out" / "stream")
    assert len(streamed) == len(set(streamed)), "an offset was written twice"
    assert streamed == _direct(bootstrap, topic, "read_committed")
    assert max(o for p, o, _, _ in streamed if p == 0) > ends[0], "nothing read from the brokers' tail"


def _apps(cluster: SparkStandalone) -> set[Path]:
    return {d for n in range(WORKERS) for d in cluster.work_dir(n).glob("app-*")}


def _on_cluster(cluster: SparkStandalone, *args: str) -> str:
    """Run ``tierkeeper ARGS`` on the cluster; returns its standard output. The executors' Python is this
    venv's by path (as the same virtualenv path on every node would be; the archive is the other test's,
    whose executors unpack it, a cost paid once), named by ``--spark-conf spark.pyspark.python``, which
    must win over the PYSPARK_PYTHON the process inherits: here the base Python, without pyarrow."""
    conf = {
        "spark.pyspark.python": sys.executable,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.cores.max": str(WORKERS),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "600s",
        "spark.ui.enabled": "false",
        "spark.network.timeout": "900s",
        "spark.executor.heartbeatInterval": "60s",
        "spark.python.authenticate.socketTimeout": "300s",
    }
    flags = [arg for key, value in conf.items() for arg in ("--spark-conf", f"{key}={value}")]
    before = _apps(cluster)
    proc = run_cli(
        *args,
        "--spark-master",
        cluster.master_url,
        *flags,
        env={"PYSPARK_PYTHON": spark_env.base_python()},
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    ran = [d for app in _apps(cluster) - before for d in app.iterdir() if (d / "stderr").exists()]
    assert ran, f"{args[0]}: no executor of the cluster ran it"
    return proc.stdout


def _cleanup_report(stdout: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(stdout)
    assert report["errors"] == [], report["errors"]
    return report


def test_export_recover_and_cleanup_run_on_the_cluster(
    spark_cluster: SparkStandalone,
    spark_dataset: Dataset,
    kafka_broker: KafkaCluster,
    tmp_path: Path,
) -> None:
    bootstrap = spark_dataset.bootstrap
    topic, tier, ends = _history(spark_dataset, kafka_broker, tmp_path)
    tiered = _tiered_rows(bootstrap, topic, ends)
    stamped = {
        p: [(e.timestamp, e.key, e.value) for e in consume(bootstrap, topic, p, "read_committed", ends[p])]
        for p in ends
    }

    # export: every tiered committed record once.
    target = Target(f"file://{tmp_path / 'export'}", str(tmp_path / "export"), tier.fs())
    out = _on_cluster(spark_cluster, "export", "--topic", topic, "--to", target.url, "--json",
                      *tier.cli_flags)  # fmt: skip
    assert json.loads(out)["records"] == len(tiered)
    rows = _exported(target)
    assert sorted((p, o, v) for p, _date, o, v in rows) == sorted((p, o, v) for p, o, _k, v in tiered)

    # recover --engine spark: the topic deleted, then restored from the tier by the executors.
    delete_topic(bootstrap, topic)
    out = _on_cluster(spark_cluster, "recover", "--topic", topic, "--bootstrap-servers",
                      bootstrap, "--transaction-records", "150", "--json", "--engine", "spark",
                      *tier.cli_flags)  # fmt: skip
    summary = json.loads(out)
    assert summary["complete"] and summary["restored_now"] == len(tiered), summary
    for p, want in stamped.items():
        got = [(r.timestamp, r.key, r.value) for r in consume_all(bootstrap, topic, p)]
        assert got == want, f"partition {p}: the restored records differ from the tiered history"

    # cleanup --engine spark: on an identical copy of the tier, the in-process cleanup deletes the same.
    copy = tmp_path / "tier-copy"
    shutil.copytree(tmp_path / "tier", copy)
    stored = sum(f.stat().st_size for f in (tmp_path / "tier").rglob("*.log") if f.parent.name == "0")
    retention = ["--remote-retention-bytes", str(stored // 2)]
    local = run_cli("cleanup", "--topic", topic, *retention, "--json", "--remote", f"file://{copy}")
    assert local.returncode == 0, local.stderr[-3000:]
    on_spark = _on_cluster(spark_cluster, "cleanup", "--topic", topic, *retention, "--json",
                           "--engine", "spark", *tier.cli_flags)  # fmt: skip
    by_local, by_spark = _cleanup_report(local.stdout), _cleanup_report(on_spark)
    assert by_spark["bytes_deleted"] == by_local["bytes_deleted"] > 0
    assert sorted(by_spark["partitions"], key=lambda d: d["partition"]) == sorted(
        by_local["partitions"], key=lambda d: d["partition"]
    )
