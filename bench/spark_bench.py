"""Data pipeline benchmarks (issue 17): Arrow decoding vs the record-level read, the tierkeeper DataSource
vs Spark's Kafka source, local[2] vs local[1], and the peak RSS of a scan.

    PYTHONPATH=.:tests:bench .venv/bin/python bench/spark_bench.py [--size-mib 256] [--segment-mib 32]
        [--small-size-mib 64] [--scan-topic-mib 1024 --scan-segment-mib 128] [--decode-rounds 3]
        [--driver-memory 1g] [--profile-dir DIR] [--json results.json]

Produces one partition (1 KB values, and a second topic with 100-byte values) into a real Kafka 4.1
broker (tests/harness), tiers it with the real ``tierkeeper copy`` to file:// in a temp dir, keeps the
broker running, then:

1. decode, one thread: ``RemoteReader.read_from_offset`` (a Python object per record, summing value
   lengths) vs ``RemoteReader.read_arrow`` (summing the value column's lengths) with the Kafka source's
   ``binary`` columns (values copied) and with ``zero_copy=True`` (``binary_view`` columns pointing into
   the mapped object), same partition, order rotating, best of ``--decode-rounds``; per core = records
   per CPU-second of the process (every thread). With ``--scan-topic-mib 1024 --scan-segment-mib 128``
   the scan topic is decoded too: that is the storage bench's data (1 GiB partition, 128 MiB segments,
   1 KB records), on which the issue states the goal. ``--decode-only`` stops after this.
2. Spark scan, ``sum(length(value))`` over every record, each in a fresh child process (own JVM):
   format("tierkeeper") on local[2] and local[1], and format("kafka") from the broker on local[2]. The
   child runs the query once to warm up, then times a second, newly built query: running the same
   DataFrame again would reuse its shuffle output and skip the scan. It samples the RSS of the Spark JVM
   and of each Python worker while the timed scan runs, and the CPU seconds of the JVMs and of the Python
   workers during it. Two more tierkeeper scans run on ``local-cluster[1,2,1024]``: there the executor is
   a JVM of its own (as on a real cluster) at Spark's smallest executor memory (512m), measured apart
   from the driver, once with the JVM's default collector and once with ``-XX:+UseSerialGC`` (the RSS
   goal is per executor process). One more local[1] scan runs confined to one core (``taskset``):
   local[1] runs one task at a time, but its Python worker and the JVM that consumes its batches are
   separate processes, so unconfined it uses both cores of a 2-core machine (the CPU seconds show it).
   ``--profile-dir DIR`` also profiles every
   tierkeeper task's ``read()`` in the Python worker (cProfile, one ``.prof`` file per task, and the
   task's wall and CPU seconds in ``tasks.jsonl``), which tells the Python side from the JVM side.

``--scan-topic-mib N`` adds a topic of N MiB (1 KB values, ``--scan-segment-mib`` segments) and runs
the scans on it instead of the decode topic, e.g. the 1 GiB partition of 128 MiB segments of the RSS goal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import storage_data

from harness.kafka import KafkaCluster
from harness.spark_kafka import connector_jars
from harness.tierkeeper_cli import run_cli

MiB = 1 << 20
REPO = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    print(f"[spark-bench] {msg}", file=sys.stderr, flush=True)


def report(results: dict[str, Any], json_path: str | None) -> int:
    """Print a benchmark's results as JSON (and write them to ``json_path`` when given); exit status 0."""
    text = json.dumps(results, indent=2)
    print(text)
    if json_path:
        Path(json_path).write_text(text)
    return 0


def decode_bench(remote: str, topic: str, rounds: int) -> dict[str, Any]:
    import pyarrow.compute as pc

    from storage_core.adapters.store import RemoteStore
    from storage_core.remote.reader import RemoteReader

    def records() -> tuple[int, int]:
        with RemoteReader(RemoteStore(remote)) as reader:
            tp = reader.resolve(topic, 0)
            start = reader.manifest(tp).start_offset or 0
            n = total = 0
            for r in reader.read_from_offset(tp, start):
                n += 1
                total += len(r.value) if r.value is not None else 0
            return n, total

    def arrow() -> tuple[int, int]:
        with RemoteReader(RemoteStore(remote)) as reader:
            tp = reader.resolve(topic, 0)
            start = reader.manifest(tp).start_offset or 0
            n = total = 0
            for batch in reader.read_arrow(tp, start):
                n += batch.num_rows
                total += pc.sum(pc.binary_length(batch.column("value"))).as_py() or 0
            return n, total

    def arrow_views() -> tuple[int, int]:
        import numpy as np

        with RemoteReader(RemoteStore(remote)) as reader:
            tp = reader.resolve(topic, 0)
            start = reader.manifest(tp).start_offset or 0
            n = total = 0
            for batch in reader.read_arrow(tp, start, zero_copy=True):
                n += batch.num_rows
                # pyarrow has no binary_length kernel for views: a view's first 4 bytes are its length.
                col = batch.column("value")
                lengths = np.frombuffer(col.buffers()[1], np.int32)[col.offset * 4 :: 4][: len(col)]
                total += int(lengths.sum())
            return n, total

    arrow()  # compile the kernels (cached afterwards) outside the measurement
    arrow_views()
    best: dict[str, tuple[float, float]] = {}
    counts: dict[str, tuple[int, int]] = {}
    runs = [("records", records), ("arrow", arrow), ("arrow_views", arrow_views)]
    for i in range(rounds):
        for name, fn in runs[i % 3 :] + runs[: i % 3]:
            wall, cpu = time.perf_counter(), time.process_time()
            counts[name] = fn()
            took = (time.perf_counter() - wall, time.process_time() - cpu)
            if name not in best or took[1] < best[name][1]:
                best[name] = took
    assert counts["records"] == counts["arrow"] == counts["arrow_views"], counts
    n = counts["arrow"][0]
    return {
        "records": n,
        "value_bytes": counts["arrow"][1],
        "record_read_records_per_cpu_s": round(n / best["records"][1]),
        "arrow_read_records_per_cpu_s": round(n / best["arrow"][1]),
        "arrow_views_read_records_per_cpu_s": round(n / best["arrow_views"][1]),
        "record_read_wall_s": round(best["records"][0], 2),
        "arrow_read_wall_s": round(best["arrow"][0], 2),
        "arrow_views_read_wall_s": round(best["arrow_views"][0], 2),
        "speedup_per_core": round(best["records"][1] / best["arrow"][1], 1),
        "zero_copy_speedup_per_core": round(best["records"][1] / best["arrow_views"][1], 1),
    }


def _kind(process: Any, cluster: bool) -> str:
    """jvm (local mode: the driver, which runs the tasks too), driver and executor (local-cluster mode),
    or python_worker."""
    if "java" not in process.name():
        return "python_worker"
    if "CoarseGrainedExecutorBackend" in " ".join(process.cmdline()):
        return "executor"
    return "driver" if cluster else "jvm"


def _rss_sampler(stop: threading.Event, out: dict[str, int], cluster: bool) -> None:
    import psutil

    me = psutil.Process()
    while not stop.is_set():
        for child in me.children(recursive=True):
            try:
                name = _kind(child, cluster)
                out[name] = max(out.get(name, 0), child.memory_info().rss)
            except psutil.Error:
                pass
        stop.wait(0.2)


def _cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of the Spark processes under this one, JVMs and Python workers apart (pyspark's
    daemon forks the workers, so their exited children count too)."""
    import psutil

    out: dict[str, float] = {}
    for child in psutil.Process().children(recursive=True):
        try:
            kind = "jvm" if "java" in child.name() else "python"
            t = child.cpu_times()
            out[kind] = out.get(kind, 0.0) + t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return out


def _profiled_source(profile_dir: str) -> type:
    """``format("tierkeeper_profiled")``: the tierkeeper source with each task's ``read()`` profiled."""
    from storage_core.spark.source import TierkeeperDataSource

    class ProfiledSource(TierkeeperDataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "tierkeeper_profiled"

        def reader(self, schema: Any) -> Any:
            inner = super().reader(schema)

            class Profiled(type(inner)):  # type: ignore[misc]
                def read(self, partition: Any) -> Any:
                    import cProfile
                    import uuid

                    profile = cProfile.Profile()
                    wall, cpu = time.perf_counter(), time.process_time()
                    rows = 0
                    batches = super().read(partition)
                    while True:
                        profile.enable()
                        batch = next(batches, None)
                        profile.disable()
                        if batch is None:
                            break
                        rows += batch.num_rows
                        yield batch
                    # wall: the whole task as seen from here (the JVM consumes between our yields);
                    # cpu: this Python worker's CPU, our decoding and pyspark's Arrow serialisation.
                    name = uuid.uuid4().hex[:8]
                    profile.dump_stats(f"{profile_dir}/{name}.prof")
                    took = {
                        "task": name, "rows": rows, "wall_s": time.perf_counter() - wall,
                        "python_cpu_s": time.process_time() - cpu,
                    }  # fmt: skip
                    with open(f"{profile_dir}/tasks.jsonl", "a") as out:
                        out.write(json.dumps(took) + "\n")

            inner.__class__ = Profiled
            return inner

    return ProfiledSource


def scan_child(ns: argparse.Namespace) -> int:
    """One scan in this process's own Spark session; prints a JSON line."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F

    jars = ",".join(str(j) for j in connector_jars(log=False))
    cluster = ns.master.startswith("local-cluster")
    builder = (
        SparkSession.builder.master(ns.master)
        .config("spark.ui.enabled", "false")
        .config("spark.jars", jars)
        .config("spark.driver.memory", ns.driver_memory)
    )
    if cluster:
        # The executors are JVMs of their own there, started by the in-process worker: their python
        # workers must find the project, and the executor's own memory is what is measured.
        builder = builder.config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        builder = builder.config("spark.executor.memory", ns.executor_memory)
    if ns.executor_java_options:
        builder = builder.config("spark.executor.extraJavaOptions", ns.executor_java_options)
    spark = builder.getOrCreate()
    source = ns.source
    if ns.profile_dir and source == "tierkeeper":
        spark.dataSource.register(_profiled_source(ns.profile_dir))
        source = "tierkeeper_profiled"

    def scan() -> DataFrame:
        if ns.source == "tierkeeper":
            df = spark.read.format(source).options(remote=ns.remote, topic=ns.topic).load()
        else:
            df = (
                spark.read.format("kafka")
                .option("kafka.bootstrap.servers", ns.bootstrap)
                .option("subscribe", ns.topic)
                .option("startingOffsets", "earliest")
                .option("endingOffsets", json.dumps({ns.topic: {"0": ns.end_offset}}))
                .options(**({"minPartitions": str(ns.min_partitions)} if ns.min_partitions else {}))
                .load()
            )
        return df

    def query() -> DataFrame:
        # A new DataFrame each time: collecting the same one twice reuses its shuffle and skips the scan.
        return scan().select(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes"))

    query().collect()  # warm: JVM classes, Python workers, numba cache
    if ns.profile_dir:
        for stale in Path(ns.profile_dir).glob("*"):
            stale.unlink()  # the warm-up's profiles
    peaks: dict[str, int] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_rss_sampler, args=(stop, peaks, cluster), daemon=True)
    sampler.start()
    cpu_before = _cpu_seconds()
    started = time.perf_counter()
    row = query().collect()[0]
    seconds = time.perf_counter() - started
    cpu_after = _cpu_seconds()
    stop.set()
    sampler.join()
    tasks = scan().rdd.getNumPartitions()
    spark.stop()
    print(
        json.dumps(
            {
                "source": ns.source,
                "master": ns.master,
                "min_partitions": ns.min_partitions,
                "driver_memory": ns.driver_memory,
                "seconds": round(seconds, 2),
                "records": row["n"],
                "value_bytes": row["bytes"],
                "tasks": tasks,
                "peak_rss_mb": {k: round(v / 1e6) for k, v in peaks.items()},
                "cpu_s": {k: round(v - cpu_before.get(k, 0.0), 2) for k, v in cpu_after.items()},
                "executor_memory": ns.executor_memory if cluster else None,
                "executor_java_options": ns.executor_java_options or None,
            }
        )
    )
    return 0


def run_scan(
    source: str,
    master: str,
    remote: str,
    topic: str,
    bootstrap: str,
    end_offset: int,
    *,
    driver_memory: str = "1g",
    executor_memory: str = "512m",
    executor_java_options: str = "",
    profile_dir: str | None = None,
    min_partitions: int | None = None,
    cpus: str | None = None,
) -> dict[str, Any]:
    args = [
        *(["taskset", "-c", cpus] if cpus is not None else []),
        sys.executable,
        __file__,
        "scan-child",
        "--source",
        source,
        "--master",
        master,
        "--remote",
        remote,
        "--topic",
        topic,
        "--bootstrap",
        bootstrap,
        "--end-offset",
        str(end_offset),
        *(["--profile-dir", profile_dir] if profile_dir else []),
        *(["--min-partitions", str(min_partitions)] if min_partitions else []),
        "--driver-memory",
        driver_memory,
        "--executor-memory",
        executor_memory,
        f"--executor-java-options={executor_java_options}",  # its value starts with a dash
    ]
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}:{REPO / 'bench'}"}
    proc = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"scan {source} {master} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["cpus"] = cpus
    log(f"{source} {master}: {result}")
    return result


def tiered_end(remote: str, topic: str) -> int:
    """One past the last tiered offset of partition 0 (records are plain, from offset 0)."""
    from storage_core.adapters.store import RemoteStore
    from storage_core.remote.reader import RemoteReader

    with RemoteReader(RemoteStore(remote)) as reader:
        end = reader.manifest(reader.resolve(topic, 0), refresh=True).end_offset
        assert end is not None, f"nothing of {topic} was tiered"
        return end + 1


def stored_bytes(remote: str, topic: str) -> int:
    from storage_core.adapters.store import RemoteStore
    from storage_core.remote.layout import SegmentObject
    from storage_core.remote.reader import RemoteReader

    with RemoteReader(RemoteStore(remote)) as reader:
        manifest = reader.manifest(reader.resolve(topic, 0), refresh=True)
        return sum(s.objects[SegmentObject.LOG].size for s in manifest.segments)


def tier(cluster: KafkaCluster, remote: str, topic: str) -> None:
    proc = run_cli(
        "copy", "--log-dir", str(cluster.log_dir(1)), "--bootstrap-servers", cluster.bootstrap_servers,
        "--topic", topic, "--remote", remote, "--json",
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"copy failed: {proc.stderr[-2000:]}")


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode")
    child = sub.add_parser("scan-child")
    for name in ("--source", "--master", "--remote", "--topic", "--bootstrap"):
        child.add_argument(name, required=True)
    child.add_argument("--end-offset", type=int, required=True)
    child.add_argument("--profile-dir")
    child.add_argument("--min-partitions", type=int)
    child.add_argument("--driver-memory", default="1g")
    child.add_argument("--executor-memory", default="512m")
    child.add_argument("--executor-java-options", default="")
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--small-size-mib", type=int, default=64)
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument("--decode-rounds", type=int, default=3)
    parser.add_argument("--decode-only", action="store_true", help="skip the Spark scans")
    parser.add_argument("--scan-topic-mib", type=int, help="scan a topic of this size instead")
    parser.add_argument("--scan-segment-mib", type=int, default=128)
    parser.add_argument("--profile-dir", help="profile the tierkeeper tasks' read() into this directory")
    parser.add_argument("--driver-memory", default="1g", help="spark.driver.memory of every scan")
    parser.add_argument("--json", help="write the results here")
    ns = parser.parse_args()
    if ns.mode == "scan-child":
        return scan_child(ns)
    results: dict[str, Any] = {"cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        work = Path(tmp)
        remote = f"file://{work / 'remote'}"
        cluster = KafkaCluster(work / "kafka", brokers=1, quick_start=False)
        cluster.start()
        try:
            topics = {"kb": ("bench-1kb", ns.size_mib, 1000), "small": ("bench-100b", ns.small_size_mib, 100)}
            produced = {}
            for key, (topic, size, value_bytes) in topics.items():
                storage_data.create_topic(cluster.bootstrap_servers, topic, ns.segment_mib * MiB)
                log(f"producing {size} MiB of {value_bytes}-byte values into {topic}")
                produced[key] = storage_data.produce(
                    cluster.bootstrap_servers, topic, size * MiB, value_bytes=value_bytes
                )
                tier(cluster, remote, topic)
            if ns.scan_topic_mib:
                storage_data.create_topic(cluster.bootstrap_servers, "bench-scan", ns.scan_segment_mib * MiB)
                log(f"producing {ns.scan_topic_mib} MiB of 1000-byte values into bench-scan")
                storage_data.produce(cluster.bootstrap_servers, "bench-scan", ns.scan_topic_mib * MiB)
                tier(cluster, remote, "bench-scan")
            decoded = {key: topic for key, (topic, _, _) in topics.items()}
            if ns.scan_topic_mib:
                decoded["scan"] = "bench-scan"  # the storage bench's data when 1024 MiB of 128 MiB segments
            for key, topic in decoded.items():
                log(f"decode bench on {topic}")
                results[f"decode_{key}"] = decode_bench(remote, topic, ns.decode_rounds)
            results["load_avg_after_decode"] = os.getloadavg()
            if ns.decode_only:
                print(json.dumps(results, indent=2))
                return 0
            topic = "bench-scan" if ns.scan_topic_mib else topics["kb"][0]
            end = tiered_end(remote, topic)  # the Kafka source reads exactly the tiered offsets
            results["scan_topic"] = {
                "topic": topic,
                "records": end,
                "stored_bytes": stored_bytes(remote, topic),
            }
            bootstrap = cluster.bootstrap_servers
            mem = ns.driver_memory
            tk2 = run_scan(
                "tierkeeper",
                "local[2]",
                remote,
                topic,
                bootstrap,
                end,
                driver_memory=mem,
                profile_dir=ns.profile_dir,
            )
            kafka2 = run_scan("kafka", "local[2]", remote, topic, bootstrap, end, driver_memory=mem)
            # The Kafka source makes one task per topic-partition unless told otherwise: also run it with
            # as many tasks as the tierkeeper scan had, so both can use both slots.
            kafka2_split = run_scan(
                "kafka",
                "local[2]",
                remote,
                topic,
                bootstrap,
                end,
                min_partitions=tk2["tasks"],
                driver_memory=mem,
            )
            tk1 = run_scan("tierkeeper", "local[1]", remote, topic, bootstrap, end, driver_memory=mem)
            # local[1] runs one task at a time, but its Python worker and the JVM consuming its batches are
            # two processes, which use both cores of this machine: on one core, local[1] is one core's scan.
            tk1_one_core = run_scan(
                "tierkeeper", "local[1]", remote, topic, bootstrap, end, driver_memory=mem, cpus="0"
            )
            # An executor of its own (local-cluster: a JVM apart from the driver, as on a real cluster) at
            # Spark's smallest executor memory, with the JVM's default collector and with the serial one.
            own_executor = "local-cluster[1,2,1024]"
            executors = [
                run_scan("tierkeeper", own_executor, remote, topic, bootstrap, end, driver_memory=mem),
                run_scan(
                    "tierkeeper", own_executor, remote, topic, bootstrap, end, driver_memory=mem,
                    executor_java_options="-XX:+UseSerialGC",
                ),
            ]  # fmt: skip
            results["scans"] = [tk2, kafka2, kafka2_split, tk1, tk1_one_core, *executors]
            results["load_avg_after_scans"] = os.getloadavg()
            results["tierkeeper_vs_kafka_local2"] = round(kafka2["seconds"] / tk2["seconds"], 2)
            results["tierkeeper_vs_kafka_split_local2"] = round(kafka2_split["seconds"] / tk2["seconds"], 2)
            results["local2_vs_local1"] = round(tk1["seconds"] / tk2["seconds"], 2)
            results["local2_vs_local1_on_one_core"] = round(tk1_one_core["seconds"] / tk2["seconds"], 2)
        finally:
            cluster.stop()
    return report(results, ns.json)


if __name__ == "__main__":
    sys.exit(main())
