"""A local PySpark session for tests: local[2], UI off, scratch dirs under the test's workdir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.kafka_dist import HarnessError, java_binary


def local_session(workdir: Path, jars: list[Path] | None = None) -> Any:
    """``jars``: extra jars on the session's classpath (e.g. Spark's Kafka connector, harness.spark_kafka)."""
    import os
    import sys

    java = java_binary()
    os.environ.setdefault("JAVA_HOME", str(Path(java).resolve().parents[1]))
    # Python workers (tasks, and the planner of Python data sources) run this interpreter, the venv with
    # tierkeeper in it, not whatever python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from storage_core.spark.daemon import DAEMON_CONF
    from storage_core.spark.daemon import MODULE as DAEMON_MODULE

    workdir.mkdir(parents=True, exist_ok=True)
    try:
        builder = SparkSession.builder
        if jars:
            builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
        return (
            builder.master("local[2]")
            .appName("tierkeeper-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.local.dir", str(workdir / "spark-local"))
            .config("spark.sql.warehouse.dir", str(workdir / "warehouse"))
            .config("spark.driver.memory", "1g")
            # As the README tells users (storage_core/spark/daemon.py): every Spark test runs it.
            .config(DAEMON_CONF, DAEMON_MODULE)
            # Generous network and worker timeouts: up to 7 sessions share 2 cores, and a starved JVM or
            # Python worker must be slow, not failed. (Spark's one fixed wait, 10 s for a streaming
            # source's Python runner to connect back, cannot be set: tests/spark's StreamRun restarts
            # a query it failed, from the query's checkpoint.)
            .config("spark.network.timeout", "900s")
            .config("spark.executor.heartbeatInterval", "60s")
            .config("spark.python.authenticate.socketTimeout", "300s")
            .config("spark.python.task.killTimeout", "60s")
            .getOrCreate()
        )
    except Exception as exc:
        raise HarnessError(f"PySpark local session could not start: {exc}") from exc
