"""Operator benchmarks (issue 15), on the harness control plane with real Kafka and the real operator process.

    PYTHONPATH=.:tests .venv/bin/python bench/operator_bench.py --topics 10000 --json /tmp/operator-bench.json
    PYTHONPATH=.:tests .venv/bin/python bench/operator_bench.py --copy-lag --rolls 8 --json /tmp/copy-lag.json

**Scale**: N TieredTopics for N real one-partition topics on ONE harness broker, created at once on the
harness API server.

The harness control plane (etcd with ``--unsafe-no-fsync``, kube-apiserver with its default inflight limits,
controller-manager) and one Kafka 4.1 broker start on this machine. N topics are created through the Admin
API (empty: a new topic holds no record, so the operator checks it and makes it Ready without a copy Job).
The operator runs as a real process (``python -m tierkeeper_operator --standalone``: kopf, the full
reconcile rounds every ``--interval`` s (default: the operator's own 30 s) and the quick rounds its watch
of TieredTopics brings for new objects). Then the N TieredTopics are POSTed at once by ``--writers``
clients, each on its own kept-alive connection, while a watch started before the first POST records when
each object is first Ready for its generation (kstatus Current); nothing lists the N objects over and
over, which would load the API server being measured.

Reported: the API server's own write rate as the baseline (``create_s``: seconds to POST the N objects,
the same number of writes as the operator's N status writes); seconds from the first POST until all are
Ready (goal <= 60 s) and from the last POST until all are Ready; per-object latency from its POST
returning to its Ready event (p50, p99, max); the rounds (count, mean duration, from the operator's
/metrics); the CPU seconds each part used during the measurement (apiserver, etcd, controller-manager,
operator, Kafka); the operator's peak RSS (VmHWM, goal < 500 MB); the load (``uptime``) before and after.
Exits 1 when a goal is missed.

**Copy lag** (``--copy-lag``): one topic with small segments fed at a steady rate on one broker; the
operator runs copy Jobs (real ``tierkeeper copy`` processes started by the process kubelet, the broker's log
dir mounted through a hostPath PersistentVolume) every ``copy.intervalSeconds`` (``--copy-interval``).
A segment's roll time is when the next segment's file appears in the leader's log dir (polled every
0.2 s); its tiering time is when its COPY_FINISHED marker is first seen in the remote tier (polled every
0.5 s). Reported per segment for ``--rolls`` segments after the first copy: delay = tiered - rolled; goal:
every delay <= copy interval + 30 s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import s3fs
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from harness.control_plane import ControlPlane
from harness.k8s import load_crds, tiered_broker
from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from harness.ports import free_ports
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.errors import KafkaAdminError

GOAL_READY_S = 60.0
GOAL_RSS_MB = 500.0


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def create_topics(kafka: KafkaCluster, names: list[str], deadline_s: float = 3600.0) -> float:
    """Create the topics (500 a request) and wait until the broker serves every partition; returns the
    seconds that took. The controller accepts 10,000 topics in seconds, but the broker then creates the
    partitions one by one for minutes (15 on the loaded VM), and until it has, ListOffsets answers
    UNKNOWN_TOPIC_OR_PART: a measurement started earlier would time the broker's catch-up, not the operator.
    No per-topic config: each one costs the broker a pass over all its logs (``retention.ms`` comes from
    the broker's ``log.retention.ms`` instead)."""
    started = time.monotonic()
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for start in range(0, len(names), 500):
        batch = [NewTopic(n, 1, 1) for n in names[start : start + 500]]
        for future in admin.create_topics(batch, request_timeout=120).values():
            future.result(300)
    served = KafkaAdmin(kafka.bootstrap_servers)
    while True:
        try:
            served.high_watermarks([(n, 0) for n in names])
            return time.monotonic() - started
        except KafkaAdminError:
            if time.monotonic() - started > deadline_s:
                raise
            time.sleep(5)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def round_stats(metrics_url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (
                "tierkeeper_reconcile_duration_seconds_sum",
                "tierkeeper_reconcile_duration_seconds_count",
                "tierkeeper_reconcile_rounds_total",
            ):
                out[sample.name] = sample.value
            if sample.name == "tierkeeper_reconcile_errors_total":
                out["errors"] = out.get("errors", 0) + sample.value
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Poster:
    """One client with its own kept-alive HTTPS connection: what kubectl or a controller does, so the
    creation rate measures the API server, not a TLS handshake per object."""

    def __init__(self, plane: ControlPlane) -> None:
        context = ssl.create_default_context(cafile=str(plane.ca_cert))
        self._connection = http.client.HTTPSConnection("127.0.0.1", plane.port, context=context, timeout=60)
        self._headers = {
            "Authorization": f"Bearer {plane.admin_token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }

    def post(self, path: str, body: dict[str, Any]) -> None:
        self._connection.request("POST", path, json.dumps(body), self._headers)
        answer = self._connection.getresponse()
        text = answer.read()
        if answer.status >= 300:
            raise RuntimeError(f"POST {path}: HTTP {answer.status}: {text[:300]!r}")


class ReadyWatch:
    """When each TieredTopic was first seen Ready for its generation (kstatus Current), from a watch
    started before the first POST: exact to the event, and it costs the API server far less than listing
    10,000 objects every second would (which would slow the very thing measured)."""

    def __init__(self, rest: Any, path: str, resource_version: str) -> None:
        self.ready_at: dict[str, float] = {}
        self._rest, self._path, self._version = rest, path, resource_version
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def wait(self, count: int, deadline: float) -> None:
        with self._changed:
            while len(self.ready_at) < count and time.monotonic() < deadline and self._thread.is_alive():
                self._changed.wait(1.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            for event in self._rest.watch(self._path, self._version, timeout_seconds=30):
                obj = event["object"]
                self._version = obj["metadata"]["resourceVersion"]
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch failed: {obj}")
                if event["type"] not in ("ADDED", "MODIFIED"):
                    continue
                status = obj.get("status") or {}
                ready = any(
                    c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])
                )
                name = obj["metadata"]["name"]
                if ready and status.get("observedGeneration") == obj["metadata"].get("generation"):
                    with self._changed:
                        self.ready_at.setdefault(name, time.monotonic())
                        self._changed.notify_all()
                if self._stop.is_set():
                    return


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def finished_bases(url: str, topic: str, options: dict[str, Any]) -> set[int]:
    """Base offsets of the topic's segments with a COPY_FINISHED marker in the remote tier."""
    from storage_core.adapters.store import RemoteStore
    from storage_core.remote.catalog import PartitionCatalog, list_partitions, list_topics
    from storage_core.remote.layout import RemoteLayout, SegmentState

    store = RemoteStore(url, options)
    layout = RemoteLayout(store.root)
    out: set[int] = set()
    for name, topic_id in list_topics(store, layout):
        if name != topic:
            continue
        for tp in list_partitions(store, layout, name, topic_id):
            for entry in PartitionCatalog(store, layout, tp).listing().segments.values():
                if entry.state == SegmentState.COPY_FINISHED:
                    out.add(entry.base_offset)
    return out


def copy_lag(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    work = Path(tempfile.mkdtemp(prefix="tk-copy-lag-"))
    result: dict[str, Any] = {
        "copy_interval_s": args.copy_interval,
        "reconcile_interval_s": args.interval,
        "load_before": uptime(),
    }
    plane = ControlPlane(work / "k8s")
    kafka = KafkaCluster(work / "kafka", brokers=1, quick_start=False)
    operator: subprocess.Popen[bytes] | None = None
    stop = threading.Event()
    moto: MotoServer | None = None
    try:
        plane.start()
        plane.apply_crds(load_crds())
        kafka.start()
        ns = "lag"
        plane.create_namespace(ns)
        topic = "lagged"
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        config = {"internal.segment.bytes": str(args.segment_kib * 1024), "retention.ms": "-1"}
        admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(60)
        kafka.wait_topic(topic, 1)
        (broker,) = kafka.node_ids
        log_dir = kafka.log_dir(broker)
        # The tier is in S3 (moto): a Job's root filesystem is read-only, as on a real cluster.
        moto = MotoServer(work / "moto").start()
        options = moto.storage_options()
        s3fs.S3FileSystem(**options).mkdir("lag")
        plane.request(
            "POST",
            f"/api/v1/namespaces/{ns}/secrets",
            {
                "metadata": {"name": "s3"},
                "stringData": {
                    "AWS_ACCESS_KEY_ID": options["key"],
                    "AWS_SECRET_ACCESS_KEY": options["secret"],
                },
            },
        )
        plane.request(
            "POST",
            "/api/v1/persistentvolumes",
            {
                "metadata": {"name": f"{ns}-data"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "manual",
                    "hostPath": {"path": str(log_dir)},
                    "claimRef": {"namespace": ns, "name": "data"},
                },
            },
        )
        plane.request(
            "POST",
            f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
            {
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "manual",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )
        api = f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}"
        plane.request("POST", f"{api}/tieredbrokers", tiered_broker(broker, plane.kubelet.node_names[0]))
        # Produce first, so the topic holds records before it is tiered (an empty one is Ready at once).
        producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 5})
        rate_bytes = args.segment_kib * 1024 / args.roll_seconds

        def feed() -> None:
            value = b"x" * 1000
            while not stop.is_set():
                sent = 0
                began = time.monotonic()
                while sent < rate_bytes / 10 and not stop.is_set():
                    producer.produce(topic, value)
                    sent += len(value)
                producer.poll(0)
                stop.wait(max(0.0, 0.1 - (time.monotonic() - began)))
            producer.flush(30)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        cluster_file = work / "local.yaml"
        cluster_file.write_text(
            yaml.safe_dump(
                {
                    "name": "local",
                    "bootstrapServers": kafka.bootstrap_servers,
                    "remote": {
                        "url": "s3://lag/tier",
                        "storageOptions": {k: options[k] for k in ("client_kwargs", "config_kwargs")},
                        "storageOptionsSecretRef": {"name": "s3"},
                    },
                    "jobs": {"image": "tierkeeper", "backoffLimit": 0, "ttlSecondsAfterFinished": 60},
                }
            )
        )
        plane.request(
            "POST",
            f"{api}/tieredtopics",
            {
                "apiVersion": "tierkeeper.io/v1alpha1",
                "kind": "TieredTopic",
                "metadata": {"name": topic},
                "spec": {
                    "clusterRef": {"name": "local"},
                    "topic": topic,
                    "localRetentionMs": -1,
                    "remoteRetentionMs": -1,
                    "copy": {"intervalSeconds": args.copy_interval},
                },
            },
        )
        log = (work / "operator.log").open("wb")
        operator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tierkeeper_operator",
                "--standalone",
                "--namespace",
                ns,
                "--cluster",
                str(cluster_file),
                "--reconcile-interval",
                str(args.interval),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": str(plane.kubeconfig)},
        )
        partition_dir = log_dir / f"{topic}-0"
        rolled: dict[int, float] = {}  # base offset -> when the next segment appeared
        tiered: dict[int, float] = {}
        seen: list[int] = []
        url = "s3://lag/tier"
        deadline = time.monotonic() + args.timeout
        first_tiered: float | None = None
        next_remote_poll = 0.0
        while time.monotonic() < deadline:
            now = time.monotonic()
            bases = sorted(int(p.name.split(".")[0]) for p in partition_dir.glob("*.log"))
            for base in bases:
                if base not in seen:
                    seen.append(base)
                    earlier = [b for b in seen if b < base and b not in rolled]
                    for b in earlier:
                        rolled[b] = now
            if now >= next_remote_poll:
                for base in finished_bases(url, topic, options):
                    tiered.setdefault(base, time.monotonic())
                next_remote_poll = now + 0.5
                if tiered and first_tiered is None:
                    first_tiered = min(tiered.values())
            if first_tiered is not None:
                measured = [b for b in rolled if rolled[b] > first_tiered and b in tiered]
                if len(measured) >= args.rolls:
                    break
            time.sleep(0.2)
        stop.set()
        ended = time.monotonic()
        measured = sorted(b for b in rolled if first_tiered is not None and rolled[b] > first_tiered)
        delays = [round(tiered[b] - rolled[b], 1) for b in measured if b in tiered]
        waiting = [round(ended - rolled[b], 1) for b in measured if b not in tiered]
        result.update(
            {
                "segments_measured": len(delays),
                "delays_s": delays,
                "max_delay_s": max(delays) if delays else None,
                # Rolled but not yet tiered when the measurement stopped, and for how long: a miss only
                # when already older than the goal.
                "still_waiting_s": waiting,
                "goal_s": args.copy_interval + 30,
                "load_after": uptime(),
            }
        )
    finally:
        stop.set()
        if operator is not None and operator.poll() is None:
            operator.terminate()
            try:
                operator.wait(30)
            except subprocess.TimeoutExpired:
                operator.kill()
        kafka.stop()
        plane.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    goal = result.get("goal_s", 0)
    met = (
        bool(result.get("delays_s"))
        and result["max_delay_s"] <= goal
        and all(w <= goal for w in result.get("still_waiting_s", []))
    )
    result["met"] = met
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0 if met else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copy-lag", action="store_true", help="run the copy-lag benchmark instead")
    parser.add_argument("--copy-interval", type=int, default=30, help="copy-lag: copy.intervalSeconds")
    parser.add_argument("--rolls", type=int, default=8, help="copy-lag: segments to measure")
    parser.add_argument("--segment-kib", type=int, default=512, help="copy-lag: segment size")
    parser.add_argument("--roll-seconds", type=float, default=5.0, help="copy-lag: seconds per segment")
    parser.add_argument("--topics", type=int, default=10000)
    parser.add_argument("--writers", type=int, default=8, help="concurrent clients creating TieredTopics")
    parser.add_argument(
        "--interval",
        type=float,
        default=30.0,
        help="operator --reconcile-interval; default: the operator's own 30 s (its rounds come sooner when a "
        "copy falls due)",
    )
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between list polls")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--heap", default="1g", help="the broker's JVM heap")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--quiet-load",
        type=float,
        default=None,
        metavar="LOAD",
        help="after the setup, wait until the 1-minute load average is at most LOAD before measuring",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if args.copy_lag:
        return copy_lag(args)

    work = Path(tempfile.mkdtemp(prefix="tk-operator-bench-"))
    load_before = uptime()
    plane = ControlPlane(work / "k8s")
    kafka = KafkaCluster(
        work / "kafka", brokers=1, heap=args.heap, broker_config={"log.retention.ms": "-1"}, quick_start=False
    )
    operator: subprocess.Popen[bytes] | None = None
    result: dict[str, Any] = {"topics": args.topics, "load_before": load_before}
    try:
        plane.start()
        plane.apply_crds(load_crds())
        kafka.start()
        ns = "bench"
        plane.create_namespace(ns)
        names = [f"t{i:05d}" for i in range(args.topics)]
        result["kafka_topics_served_s"] = round(create_topics(kafka, names), 1)
        (broker,) = kafka.node_ids
        brokers = f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredbrokers"
        plane.request("POST", brokers, tiered_broker(broker, plane.kubelet.node_names[0]))
        cluster_file = work / "local.yaml"
        cluster_file.write_text(
            yaml.safe_dump(
                {
                    "name": "local",
                    "bootstrapServers": kafka.bootstrap_servers,
                    "remote": {"url": f"file://{work}/tier"},
                    "jobs": {"image": "tierkeeper"},
                }
            )
        )
        (metrics_port,) = free_ports(1)
        log = (work / "operator.log").open("wb")
        operator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tierkeeper_operator",
                "--standalone",
                "--namespace",
                ns,
                "--cluster",
                str(cluster_file),
                "--reconcile-interval",
                str(args.interval),
                "--metrics-port",
                str(metrics_port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": str(plane.kubeconfig)},
        )
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the operator is up once its rounds answer
            try:
                if round_stats(metrics_url).get("tierkeeper_reconcile_rounds_total", 0) >= 1:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("the operator did not start: " + (work / "operator.log").read_text()[-3000:])

        if args.quiet_load is not None:
            # Setup (10,000 partitions) takes minutes; the measurement starts once the machine is quiet.
            while os.getloadavg()[0] > args.quiet_load:
                time.sleep(10)
        result["load_at_start"] = uptime()
        path = f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredtopics"
        posted: dict[str, float] = {}
        lock = threading.Lock()
        own = threading.local()  # one kept-alive connection per writer thread
        watch = ReadyWatch(plane.rest(), path, plane.request("GET", path)["metadata"]["resourceVersion"])
        watch.start()
        parts = {**plane.pids(), "operator": operator.pid, "kafka": kafka.pid(broker) or 0}
        parts = {name: pid for name, pid in parts.items() if pid}
        cpu_before = {name: cpu_seconds(pid) for name, pid in parts.items()}

        def create(index: int) -> None:
            name = names[index]
            body = {
                "apiVersion": "tierkeeper.io/v1alpha1",
                "kind": "TieredTopic",
                "metadata": {"name": name},
                "spec": {"clusterRef": {"name": "local"}, "topic": name},
            }
            if not hasattr(own, "poster"):
                own.poster = Poster(plane)
            own.poster.post(path, body)
            with lock:
                posted[name] = time.monotonic()

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.writers) as pool:
            list(pool.map(create, range(args.topics)))
        created = time.monotonic()
        result["create_s"] = round(created - t0, 1)
        result["create_per_s"] = round(args.topics / (created - t0))
        watch.wait(args.topics, t0 + args.timeout)
        watch.stop()
        ready_at = dict(watch.ready_at)
        last_ready = max(ready_at.values()) if len(ready_at) == args.topics else None
        latencies = [ready_at[n] - posted[n] for n in ready_at if n in posted]
        stats = round_stats(metrics_url)
        rounds = stats.get("tierkeeper_reconcile_duration_seconds_count", 0)
        result.update(
            {
                "ready": len(ready_at),
                "all_ready_s": None if last_ready is None else round(last_ready - t0, 1),
                "ready_after_last_post_s": None if last_ready is None else round(last_ready - created, 1),
                "latency_p50_s": round(percentile(latencies, 0.5), 1) if latencies else None,
                "latency_p99_s": round(percentile(latencies, 0.99), 1) if latencies else None,
                "latency_max_s": round(max(latencies), 1) if latencies else None,
                "latency_mean_s": round(statistics.fmean(latencies), 1) if latencies else None,
                "rounds": int(rounds),
                "round_mean_s": round(stats["tierkeeper_reconcile_duration_seconds_sum"] / rounds, 2)
                if rounds
                else None,
                "round_errors": int(stats.get("errors", 0)),
                "cpu_s": {name: round(cpu_seconds(pid) - cpu_before[name], 1) for name, pid in parts.items()},
                "operator_peak_rss_mb": round(peak_rss_mb(operator.pid), 1),
                "load_after": uptime(),
            }
        )
    finally:
        if operator is not None and operator.poll() is None:
            operator.terminate()
            try:
                operator.wait(30)
            except subprocess.TimeoutExpired:
                operator.kill()
        kafka.stop()
        plane.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    met_ready = result.get("all_ready_s") is not None and result["all_ready_s"] <= GOAL_READY_S
    met_rss = result.get("operator_peak_rss_mb", 1e9) < GOAL_RSS_MB
    result["met"] = {"all_ready_60s": met_ready, "rss_500mb": met_rss}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0 if met_ready and met_rss else 1


if __name__ == "__main__":
    sys.exit(main())
