"""Export benchmark (issue 32): ``tierkeeper export --format iceberg`` against the plain Parquet export of
the same rows with Spark in the same run, and an incremental Iceberg run over one new segment.

    PYTHONPATH=.:tests:bench .venv/bin/python bench/export_bench.py [--size-mib 512] [--segment-mib 32]
        [--rounds 2] [--json results.json]

Produces ``--size-mib`` of 1 KB values into one partition of a real Kafka 4.1 broker
(tests/harness), tiers them with the real ``tierkeeper copy`` to file:// in a temp dir, then in ONE
SparkSession (local[2]) runs both exports into fresh targets, alternating which goes first, ``--rounds``
times, and keeps each one's best: records per second of the whole run (planning, Spark tasks, the
Parquet export's state writes, the Iceberg commit). Then it produces and tiers about one more segment
and times an Iceberg run on the table the last round committed: it must read only the
new segment (its records are reported), not rescan the topic.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import storage_data
from spark_bench import report, tier

from harness.kafka import KafkaCluster
from harness.spark import local_session

MiB = 1 << 20


def log(msg: str) -> None:
    print(f"[export-bench] {msg}", file=sys.stderr, flush=True)


def _export(spark: Any, remote: str, topic: str, target: str, fmt: str) -> tuple[float, int]:
    from storage_core.jobs.export import run_export
    from storage_core.jobs.export_iceberg import run_export_iceberg
    from storage_core.remote.reader import Isolation
    from storage_core.spark.options import ScanOptions, StorageSpec

    source = StorageSpec(remote)
    opts = ScanOptions(storage=source, topic=topic, isolation=Isolation.READ_COMMITTED)  # the CLI's default
    start = time.perf_counter()
    if fmt == "iceberg":
        records = run_export_iceberg(spark, source, StorageSpec(target), opts).records
    else:
        records = run_export(spark, source, StorageSpec(target), opts).records
    return time.perf_counter() - start, records


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", help="write the results here")
    ns = parser.parse_args()
    results: dict[str, Any] = {"cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()}
    topic = "bench-export"
    with tempfile.TemporaryDirectory(prefix="export-bench-") as tmp:
        work = Path(tmp)
        remote = f"file://{work / 'remote'}"
        cluster = KafkaCluster(work / "kafka", brokers=1, quick_start=False)
        cluster.start()
        spark = None
        try:
            storage_data.create_topic(cluster.bootstrap_servers, topic, ns.segment_mib * MiB)
            log(f"producing {ns.size_mib} MiB of 1000-byte values into {topic}")
            storage_data.produce(cluster.bootstrap_servers, topic, ns.size_mib * MiB)
            tier(cluster, remote, topic)
            spark = local_session(work / "spark")
            best: dict[str, tuple[float, int]] = {}
            for r in range(ns.rounds):
                order = ["parquet", "iceberg"] if r % 2 == 0 else ["iceberg", "parquet"]
                for fmt in order:
                    target = work / f"{fmt}-{r}"
                    seconds, records = _export(spark, remote, topic, f"file://{target}", fmt)
                    log(f"round {r}: {fmt} {records} records in {seconds:.2f} s")
                    if fmt not in best or seconds < best[fmt][0]:
                        best[fmt] = (seconds, records)
                    if r < ns.rounds - 1 or fmt == "parquet":
                        shutil.rmtree(target)
            for fmt, (seconds, records) in best.items():
                results[fmt] = {
                    "seconds": round(seconds, 3),
                    "records": records,
                    "rps": round(records / seconds),
                }
            rate = {fmt: records / seconds for fmt, (seconds, records) in best.items()}
            results["iceberg_vs_parquet"] = round(rate["iceberg"] / rate["parquet"], 3)
            log(f"iceberg / parquet throughput: {results['iceberg_vs_parquet']}x")

            log("producing and tiering about one more segment")
            storage_data.produce(cluster.bootstrap_servers, topic, ns.segment_mib * MiB, seed=406)
            tier(cluster, remote, topic)
            table = work / f"iceberg-{ns.rounds - 1}"
            seconds, records = _export(spark, remote, topic, f"file://{table}", "iceberg")
            results["incremental"] = {"seconds": round(seconds, 3), "records": records}
            log(f"incremental iceberg run: {records} new records in {seconds:.2f} s")
        finally:
            if spark is not None:
                spark.stop()
            cluster.stop()
    results["load_avg_at_end"] = os.getloadavg()
    return report(results, ns.json)


if __name__ == "__main__":
    sys.exit(main())
