"""An idle stream's object-store requests per minute (issue 31): reported, and bounded by the refresh
interval rather than by Spark's trigger rate.

    PYTHONPATH=.:tests:bench .venv/bin/python bench/spark_idle_bench.py [--partitions 4]
        [--intervals-ms 5000,20000] [--seconds 60] [--json results.json]

A topic of ``--partitions`` partitions is produced into a real Kafka 4.1 broker (tests/harness) and tiered
by the real ``tierkeeper copy`` to a moto S3 bucket, through a counting proxy (tests/harness/s3_faults.py
with no fault planned: it counts every request it forwards). For each ``manifestRefreshIntervalMs`` a
stream reads the tier to a ``noop`` sink with Spark's default trigger (a new micro-batch as soon as the
last ends: when idle, Spark asks the source for its latest offset about every 10 ms), catches up, and
then stays idle for ``--seconds`` while the proxy counts. Nothing is produced or tiered meanwhile.

Reported per interval: requests per minute while idle and requests per refresh (requests per minute
over refreshes per minute), and the last micro-batch id before and after the window. The bound holds
when requests per minute scale with 1 / interval, not with Spark's ~100 polls a second.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spark_bench import log, report

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from harness.s3_faults import FaultPlan, FaultProxy
from harness.spark import local_session
from harness.tierkeeper_cli import run_cli

MiB = 1 << 20
BUCKET = "idle-bench"


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    config = {"segment.bytes": str(MiB), "retention.ms": "-1", "retention.bytes": "-1"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(60)


def _produce(bootstrap: str, topic: str, partitions: int, mib_each: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    value = os.urandom(1000)
    for n in range(partitions * mib_each * 1000):
        producer.produce(topic, value=value, partition=n % partitions)
        if n % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("records left unsent")


def _idle(
    spark: Any, options: dict[str, str], interval_ms: int, seconds: float, proxy: FaultProxy, ckpt: Path
) -> Any:
    query = (
        spark.readStream.format("tierkeeper")
        .options(**options)
        .option("startingOffsets", "earliest")
        .option("manifestRefreshIntervalMs", str(interval_ms))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(ckpt))
        .start()
    )
    try:
        query.processAllAvailable()
        batches_before = query.lastProgress["batchId"] if query.lastProgress else 0
        before, started = proxy.forwarded, time.monotonic()
        time.sleep(seconds)  # the measurement window itself: requests counted while nothing happens
        requests, elapsed = proxy.forwarded - before, time.monotonic() - started
        progress = query.lastProgress
    finally:
        query.stop()
    per_minute = requests * 60 / elapsed
    refreshes_per_minute = 60_000 / interval_ms
    return {
        "interval_ms": interval_ms,
        "idle_seconds": round(elapsed, 1),
        "requests": requests,
        "requests_per_minute": round(per_minute, 1),
        "refreshes_per_minute": round(refreshes_per_minute, 2),
        "requests_per_refresh": round(per_minute / refreshes_per_minute, 1),
        "batches_before_idle": batches_before,
        "batches_after_idle": progress["batchId"] if progress else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--mib-each", type=int, default=2, help="history per partition")
    parser.add_argument("--intervals-ms", default="5000,20000")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--topic", default="bench-idle")
    parser.add_argument("--json", help="write the results here")
    ns = parser.parse_args()
    intervals = [int(v) for v in ns.intervals_ms.split(",")]
    results: dict[str, Any] = {"cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg(), "runs": []}
    with tempfile.TemporaryDirectory(prefix="spark-idle-bench-") as tmp:
        work = Path(tmp)
        moto = MotoServer(work / "moto").start()
        proxy = FaultProxy(moto.endpoint_url, FaultPlan()).start()
        cluster = KafkaCluster(work / "kafka", brokers=1, quick_start=False)
        cluster.start()
        try:
            import s3fs

            options = moto.storage_options()
            s3fs.S3FileSystem(**options).mkdir(BUCKET)
            os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = (
                options["key"],
                options["secret"],
            )
            bootstrap = cluster.bootstrap_servers
            _create_topic(bootstrap, ns.topic, ns.partitions)
            log(f"producing {ns.partitions} x {ns.mib_each} MiB and tiering it through the counting proxy")
            _produce(bootstrap, ns.topic, ns.partitions, ns.mib_each)
            remote = f"s3://{BUCKET}/tier"
            proc = run_cli(
                "copy", "--log-dir", str(cluster.log_dir(1)), "--bootstrap-servers", bootstrap,
                "--topic", ns.topic, "--remote", remote, "--endpoint-url", proxy.endpoint_url,
                "--path-style", "--json",
            )  # fmt: skip
            if proc.returncode != 0:
                raise RuntimeError(f"copy failed: {proc.stderr[-2000:]}")
            spark = local_session(work / "spark")
            df_options = {
                "remote": remote,
                "topic": ns.topic,
                "endpointUrl": proxy.endpoint_url,
                "pathStyle": "true",
                "storage.use_listings_cache": "false",
            }
            try:
                for interval in intervals:
                    run = _idle(spark, df_options, interval, ns.seconds, proxy, work / f"ckpt-{interval}")
                    log(f"interval {interval} ms: {run}")
                    results["runs"].append(run)
            finally:
                spark.stop()
        finally:
            cluster.stop()
            proxy.stop()
            moto.stop()
    results["load_avg_at_end"] = os.getloadavg()
    return report(results, ns.json)


if __name__ == "__main__":
    sys.exit(main())
