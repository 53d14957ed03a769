"""A ``continueFromKafka`` stream against Spark's Kafka source on the same records (issue 31).

    PYTHONPATH=.:tests:bench .venv/bin/python bench/spark_hybrid_bench.py [--history-mib 128]
        [--tail-mib 64] [--segment-mib 16] [--json results.json]

One partition of 1 KB values is produced into a real Kafka 4.1 broker (tests/harness) and tiered with
the real ``tierkeeper copy`` to file:// (the history, ``H`` offsets); then ``--tail-mib`` more is
produced and left on the brokers (the tail). Nothing is trimmed: Spark's Kafka source reads every
record from the broker. Each source runs in a child process of its own (own JVM, local[2]) as one
stream, ``startingOffsets=earliest``, ``maxOffsetsPerTrigger=H``, to the ``noop`` sink until all is
processed: its first micro-batch is exactly the history, its second the tail, so the two are timed
apart from the stream's own progress reports (``triggerExecution`` of each batch; ``addBatch`` is the
read alone). A batch query of the same source warms the JVM and the Python workers first.

The ratios (``history_ratio``, ``tail_ratio``: the Kafka source's seconds over the hybrid's) are from one
run; the issue's goals are >= 2x over history and >= 0.9x over the tail.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import storage_data
from spark_bench import REPO, log, report, tier, tiered_end

from harness.kafka import KafkaCluster
from harness.spark_kafka import connector_jars

MiB = 1 << 20


def _offsets(value: Any) -> dict[str, Any]:
    """A progress report's offsets: an object, a JSON string of one (as some versions give), or null."""
    if not value:
        return {}
    return json.loads(value) if isinstance(value, str) else dict(value)


def stream_child(ns: argparse.Namespace) -> int:
    """One stream in this process's own Spark session; prints a JSON line of its batches."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    jars = ",".join(str(j) for j in connector_jars(log=False))
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.jars", jars)
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    if ns.source == "hybrid":
        options = {
            "remote": ns.remote,
            "topic": ns.topic,
            "continueFromKafka": "true",
            "kafka.bootstrap.servers": ns.bootstrap,
        }
        fmt = "tierkeeper"
    else:
        options = {"kafka.bootstrap.servers": ns.bootstrap, "subscribe": ns.topic}
        fmt = "kafka"
    # Warm: the JVM's classes, the Python workers (a small batch read of the same source).
    warm = {"endingOffsets": json.dumps({ns.topic: {"0": 1000}}), "startingOffsets": "earliest"}
    spark.read.format(fmt).options(**options, **warm).load().count()
    from spark.conftest import StreamRun  # restarts a query Spark's fixed 10 s connect-back wait failed

    def start() -> Any:
        return (
            spark.readStream.format(fmt)
            .options(**options)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(ns.history))
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", ns.checkpoint)
            .start()
        )

    run = StreamRun(start)
    try:
        run.process_all_available()
        # Each report's JSON: its sources' offsets are Kafka's JSON objects there (null before the first).
        progress = [json.loads(p.json) for p in run.query.recentProgress]
    finally:
        run.stop()
        spark.stop()
    batches = []
    for p in progress:
        source = p["sources"][0]
        if not source.get("endOffset"):
            continue
        start = _offsets(source.get("startOffset")).get(ns.topic, {})
        end = _offsets(source["endOffset"])[ns.topic]
        offsets = int(end["0"]) - int(start.get("0", 0))
        if offsets == 0:
            continue
        batches.append(
            {
                "offsets": offsets,
                "rows": p["numInputRows"],
                "trigger_s": p["durationMs"]["triggerExecution"] / 1000,
                "add_batch_s": p["durationMs"].get("addBatch", 0) / 1000,
            }
        )
    print(json.dumps({"source": ns.source, "batches": batches}))
    return 0


def run_stream(
    source: str, ns: argparse.Namespace, remote: str, bootstrap: str, history: int, work: Path
) -> Any:
    args = [
        sys.executable, __file__, "stream-child", "--source", source, "--remote", remote, "--topic", ns.topic,
        "--bootstrap", bootstrap, "--history", str(history), "--checkpoint", str(work / f"ckpt-{source}"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}:{REPO / 'bench'}"}
    proc = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"stream {source} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    log(f"{source}: {result}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode")
    child = sub.add_parser("stream-child")
    for name in ("--source", "--remote", "--topic", "--bootstrap", "--checkpoint"):
        child.add_argument(name, required=True)
    child.add_argument("--history", type=int, required=True)
    parser.add_argument("--history-mib", type=int, default=128)
    parser.add_argument("--tail-mib", type=int, default=64)
    parser.add_argument("--segment-mib", type=int, default=16)
    parser.add_argument("--topic", default="bench-hybrid")
    parser.add_argument("--json", help="write the results here")
    ns = parser.parse_args()
    if ns.mode == "stream-child":
        return stream_child(ns)
    if ns.tail_mib >= ns.history_mib:
        parser.error("--tail-mib must be below --history-mib (the tail is the second batch of at most H)")
    results: dict[str, Any] = {"cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="spark-hybrid-bench-") as tmp:
        work = Path(tmp)
        remote = f"file://{work / 'remote'}"
        cluster = KafkaCluster(work / "kafka", brokers=1, quick_start=False)
        cluster.start()
        try:
            bootstrap = cluster.bootstrap_servers
            storage_data.create_topic(bootstrap, ns.topic, ns.segment_mib * MiB)
            log(f"producing {ns.history_mib} MiB of history, tiering it, then {ns.tail_mib} MiB of tail")
            storage_data.produce(bootstrap, ns.topic, ns.history_mib * MiB)
            tier(cluster, remote, ns.topic)
            history = tiered_end(remote, ns.topic)
            storage_data.produce(bootstrap, ns.topic, ns.tail_mib * MiB)
            from storage_core.adapters.kafka_admin import KafkaAdmin

            end = KafkaAdmin(bootstrap).high_watermarks([(ns.topic, 0)])[(ns.topic, 0)]
            results["offsets"] = {"history": history, "tail": end - history}
            runs = {s: run_stream(s, ns, remote, bootstrap, history, work) for s in ("hybrid", "kafka")}
            results["runs"] = runs
            results["load_avg_after"] = os.getloadavg()
            for i, part in enumerate(("history", "tail")):
                hybrid, kafka = runs["hybrid"]["batches"][i], runs["kafka"]["batches"][i]
                want = results["offsets"][part]
                assert hybrid["offsets"] == kafka["offsets"] == want, (part, hybrid, kafka, want)
                assert hybrid["rows"] == kafka["rows"] == want, (part, hybrid, kafka, want)
                results[f"{part}_ratio"] = round(kafka["trigger_s"] / hybrid["trigger_s"], 2)
                results[f"{part}_ratio_add_batch"] = round(kafka["add_batch_s"] / hybrid["add_batch_s"], 2)
                mib = want * 1000 / MiB
                results[f"{part}_mib_per_s"] = {
                    "hybrid": round(mib / hybrid["trigger_s"], 1),
                    "kafka": round(mib / kafka["trigger_s"], 1),
                }
        finally:
            cluster.stop()
    return report(results, ns.json)


if __name__ == "__main__":
    sys.exit(main())
