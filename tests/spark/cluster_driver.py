"""The driver of tests/spark/test_spark_cluster.py, run as a process of its own: a process holds one
SparkContext, and the test session's is local mode. Run as ``python -m spark.cluster_driver SPEC.json``
(PYTHONPATH=tests); the spec names the master, the workers' Python, further settings and the reads. It
writes what it read as Parquet under the spec's ``out`` and prints, last, the application id and where
each executor's Python workers found Python, pyarrow and Tierkeeper.

What a user on a cluster does: a session of ``spark://...``, the workers' Python named by
``PYSPARK_PYTHON`` (and ``spark.pyspark.python``, what spark-submit would turn into it), here an
environment shipped with ``spark.archives``, the source registered, a batch read and a
``continueFromKafka`` stream.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

from .conftest import StreamRun


def _probe(_rows: Iterator[int]) -> Iterator[dict[str, str]]:
    import os

    import pyarrow

    import storage_core

    yield {
        "cwd": os.getcwd(),
        "python": sys.executable,
        "pyarrow": pyarrow.__file__ or "",
        "storage_core": storage_core.__file__ or "",
    }


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    from pyspark.sql import SparkSession

    from storage_core.spark import register

    out = Path(spec["out"])
    builder = (
        SparkSession.builder.master(spec["master"])
        .appName("tierkeeper-cluster-test")
        .config("spark.pyspark.python", spec["python"])
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", str(spec["workers"]))
        # Every worker's executor registered before the first job, so the tasks spread over them all.
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "600s")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", str(out / "spark-local"))
        # As the local session (tests/harness/spark.py): slow under load, never failed for it.
        .config("spark.network.timeout", "900s")
        .config("spark.executor.heartbeatInterval", "60s")
        .config("spark.python.authenticate.socketTimeout", "300s")
        .config("spark.python.task.killTimeout", "60s")
    )
    for key, value in spec.get("conf", {}).items():  # e.g. spark.archives
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        register(spark)
        # Where each executor's Python workers found Python, pyarrow and Tierkeeper (one task per core).
        cores = int(spec["workers"])
        probed = spark.sparkContext.parallelize(range(cores), cores).mapPartitions(_probe).collect()
        columns = ["partition", "offset", "key", "value"]
        batch = spark.read.format("tierkeeper").options(**spec["batch"]).load().select(*columns)
        batch.write.parquet(str(out / "batch"))

        def start() -> object:
            stream = spark.readStream.format("tierkeeper").options(**spec["stream"]).load().select(*columns)
            return (
                stream.writeStream.format("parquet")
                .option("path", str(out / "stream"))
                .option("checkpointLocation", str(out / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )

        StreamRun(start).await_termination()
        print(json.dumps({"app_id": spark.sparkContext.applicationId, "probed": probed}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
