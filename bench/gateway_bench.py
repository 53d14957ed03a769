"""Gateway benchmark (issue 27): history through the gateway vs straight from the broker, pass-through,
memory, and producer p99 while consumers read old data.

    PYTHONPATH=.:tests:bench .venv/bin/python bench/gateway_bench.py [--size-mib 1024] [--segment-mib 64]
        [--brokers 3] [--targets file,s3] [--rounds 2] [--pass-mib 256] [--rss-mib 64]
        [--idle-connections 1000] [--p99-seconds 20] [--profile DIR] [--json results.json]

One Kafka 4.1 cluster (tests/harness), one topic ``history`` of one partition (RF 1) holding ``--size-mib``
of 1 KB records (librdkafka, batch.size 1 MB, no compression), all but the active segment tiered by
``tierkeeper copy`` to each target (file:// in the temp dir, s3:// on a moto server). Then:

1. direct, before the trim (the issue's baseline, with the segments read into the page cache first): Kafka's
   own ``ConsumerPerformance`` (kafka-tools jar, its fetch.MB.sec: group join excluded) and a confluent-kafka
   ``consume()`` loop (child process) read every tiered offset; and seed 000's test case 2: an acks=all
   producer (one 1 KiB record every 1/``--probe-rate`` s, RF min(brokers, 3), straight to the brokers)
   while 4 consumers read the old data from the broker, p99 over ``--p99-seconds``.
2. ``tierkeeper cleanup --local-retention-bytes 0``: the brokers' log start moves to the active segment.
3. per target, a fresh ``tierkeeper gateway`` (one per phase, so its peak RSS is the phase's): the same two
   consumers from offset 0 through it (every offset from the tier); the ratio is gateway MiB/s / direct
   MiB/s of the same consumer reading the twin topic ``history-twin`` (the same records produced the same
   way, never trimmed, in page cache) straight from the broker in the round beside it, order alternating,
   median over ``--rounds``: on a shared machine the load moves by the minute, and reads seconds apart
   compare fairly. The direct read before the trim is reported beside it. On s3:// moto's own GET
   throughput is measured in the same run (``cat_file`` of the tiered .log objects in 1 MiB ranges, 4 at
   a time like the gateway's read-ahead), since moto, a Python server, may be the bound. On file:// also:
   the p99 case with the 4 consumers reading history through the gateway; ``--idle-connections`` client
   connections that each did an ApiVersions and stay open, and while they are held 16 consumers reading
   history at once (each ``--rss-mib`` from its own place), with the gateway's peak RSS (VmHWM), a
   Metadata through the gateway and an ApiVersions on every held connection at the end.
4. pass-through: ``ProducerPerformance`` (acks=all, 1 KiB records, ``--pass-mib``) and
   ``ConsumerPerformance`` of local (untiered) data, through the gateway vs direct, alternating.

``--profile DIR`` runs each gateway under cProfile (its event loop thread) and writes DIR/<phase>.prof.
Everything lives in one temp dir, removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway import free_port_block
from harness.kafka import KafkaCluster
from harness.kafka_dist import classpath, java_binary
from harness.moto_s3 import MotoServer
from harness.ports import wait_port
from harness.tierkeeper_cli import run_cli

MiB = 1 << 20
TOPIC, TWIN, LIVE, PROBE = "history", "history-twin", "live", "probe"
RECORD_BYTES = 1024
HISTORY_GOAL, PASS_GOAL, RSS_GOAL = 1.0, 0.85, 256 * 1000 * 1000
REPO = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass
class Row:
    benchmark: str
    baseline: str
    ours: str
    ratio: float | None
    goal: str
    met: bool | None
    notes: str = ""


@dataclass
class Results:
    machine: dict[str, Any]
    data: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


def machine_notes() -> dict[str, Any]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_start": os.getloadavg(),
    }


# ---- data ----------------------------------------------------------------------------------------
def create_topic(bootstrap: str, name: str, partitions: int, rf: int, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    settings = {"retention.ms": "-1", "retention.bytes": "-1", **config}
    admin.create_topics([NewTopic(name, partitions, rf, config=settings)])[name].result(60)


def produce(bootstrap: str, topic: str, total_bytes: int, partitions: int = 1) -> int:
    """1 KB records of incompressible values until ``total_bytes``; returns the record count."""
    pool = random.Random(405).randbytes(8 * MiB)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "none",
            "acks": "all",
            "queue.buffering.max.kbytes": 262144,
        }
    )
    count = 0
    span = len(pool) - RECORD_BYTES
    while count * RECORD_BYTES < total_bytes:
        start = (count * 7919) % span
        while True:
            try:
                producer.produce(
                    topic, value=pool[start : start + RECORD_BYTES], partition=count % partitions
                )
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        if count % 2000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("produce: records left undelivered")
    return count


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"marks-{uuid.uuid4().hex[:6]}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in range(partitions)
        }
    finally:
        consumer.close()


def warm(paths: list[Path]) -> None:
    """Read files into the page cache (the baseline is a broker serving from memory)."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(8 * MiB):
                pass


# ---- the gateway ----------------------------------------------------------------------------------
@dataclass
class GatewayRun:
    bootstrap_servers: str
    remote_flags: list[str]
    workdir: Path
    env: dict[str, str]
    profile: Path | None = None
    proc: subprocess.Popen[str] | None = None
    port: int = 0

    def start(self) -> GatewayRun:
        self.port = free_port_block(8)
        self.workdir.mkdir(parents=True, exist_ok=True)
        runner = [sys.executable]
        if self.profile is not None:
            runner += ["-m", "cProfile", "-o", str(self.profile)]
        self.proc = subprocess.Popen(
            [
                *runner,
                "-m",
                "storage_core.cli",
                "gateway",
                "--bootstrap-servers",
                self.bootstrap_servers,
                "--listen",
                f"127.0.0.1:{self.port}",
                *self.remote_flags,
            ],
            stdout=subprocess.PIPE,
            stderr=open(self.workdir / "gateway.log", "a"),
            text=True,
            env={**os.environ, **self.env},
            cwd=REPO,
        )
        assert self.proc.stdout is not None
        banner = self.proc.stdout.readline().strip()
        if not banner.startswith("tierkeeper gateway: bootstrap") or not wait_port(self.port, 60):
            self.stop()
            raise RuntimeError(f"the gateway did not start: {banner!r}")
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def status(self, field_name: str) -> int:
        """A /proc/PID/status field in bytes (VmRSS, VmHWM)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu_seconds(self) -> float:
        parts = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(15)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.proc = None


@contextmanager
def gateway(ctx: Bench, target: Target, phase: str) -> Iterator[GatewayRun]:
    profile = ctx.ns.profile / f"{target.kind}-{phase}.prof" if ctx.ns.profile else None
    run = GatewayRun(
        ctx.cluster.bootstrap_servers,
        [*target.flags, *ctx.ns.gateway_arg],
        ctx.work / f"gateway-{target.kind}-{phase}",
        {**target.env, **dict(kv.split("=", 1) for kv in ctx.ns.gateway_env)},
        profile,
    ).start()
    try:
        yield run
    finally:
        run.stop()


# ---- consumers ------------------------------------------------------------------------------------
def java_tool(main: str, *args: str, timeout: float = 1800) -> str:
    proc = subprocess.run(
        [java_binary(), "-Xmx512m", "-XX:+UseG1GC", "-cp", classpath(), main, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{main} failed ({proc.returncode}): {proc.stderr[-3000:]}{proc.stdout[-2000:]}")
    return proc.stdout


def consumer_perf(bootstrap: str, topic: str, messages: int) -> dict[str, float]:
    """Kafka's ConsumerPerformance from the earliest offset (a new group): its fetch MB/s (MB = MiB, group
    join excluded) and wall seconds of the whole run."""
    started = time.monotonic()
    out = java_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(messages),
        "--group",
        f"perf-{uuid.uuid4().hex[:8]}",
        "--timeout",
        "60000",
    )
    wall = time.monotonic() - started
    lines = [line for line in out.splitlines() if line and line[0].isdigit()]
    cols = [c.strip() for c in lines[-1].split(",")]
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    return {
        "mib": float(cols[2]),
        "records": float(cols[4]),
        "rebalance_ms": float(cols[6]),
        "fetch_ms": float(cols[7]),
        "mib_s": float(cols[8]),
        "wall_s": round(wall, 2),
    }


def consume_child(
    bootstrap: str,
    topic: str,
    starts: list[int],
    ends: list[int],
    *,
    seconds: float = 0.0,
    wrap_from: int = 0,
) -> subprocess.Popen[str]:
    """A child process with one confluent-kafka consumer (a thread each) per start offset, reading
    partition 0 from ``starts[i]`` to ``ends[i]``; with ``seconds`` each starts over at ``wrap_from``
    when it reaches its end, until that long has passed. Prints one JSON line of results."""
    spec = {
        "bootstrap": bootstrap,
        "topic": topic,
        "starts": starts,
        "ends": ends,
        "seconds": seconds,
        "wrap_from": wrap_from,
    }
    return subprocess.Popen(
        [sys.executable, __file__, "--consume-child", json.dumps(spec)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}:{REPO / 'bench'}"},
    )


def child_result(proc: subprocess.Popen[str], timeout: float = 3600) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"consumer child failed ({proc.returncode}): {out[-2000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _consume_main(spec: dict[str, Any]) -> None:
    from confluent_kafka import KafkaException

    results: list[dict[str, float]] = [{} for _ in spec["starts"]]
    deadline = time.monotonic() + spec["seconds"] if spec["seconds"] else None

    def one(i: int, start: int, end: int) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": spec["bootstrap"],
                "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "log_level": 2,
            }
        )
        got = 0
        records = 0
        began = time.monotonic()
        position = start
        consumer.assign([TopicPartition(spec["topic"], 0, start)])
        while True:
            batch = consumer.consume(1000, 1.0)
            for msg in batch:
                if msg.error():
                    raise KafkaException(msg.error())
                got += len(msg.value() or b"")
                records += 1
                position = msg.offset() + 1
            if deadline is not None and time.monotonic() > deadline:
                break
            if position >= end:
                if deadline is None:
                    break
                position = spec["wrap_from"]
                consumer.assign([TopicPartition(spec["topic"], 0, position)])
        took = time.monotonic() - began
        consumer.close()
        results[i] = {"bytes": got, "records": records, "seconds": took, "mib_s": got / MiB / took}

    threads = [
        threading.Thread(target=one, args=(i, s, e))
        for i, (s, e) in enumerate(zip(spec["starts"], spec["ends"], strict=True))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"consumers": results}), flush=True)


def confluent_read(bootstrap: str, topic: str, start: int, end: int) -> dict[str, float]:
    consumers: list[dict[str, float]] = child_result(consume_child(bootstrap, topic, [start], [end]))[
        "consumers"
    ]
    return consumers[0]


# ---- the producer probe (seed 000, test case 2) ----------------------------------------------------
@dataclass
class Probe:
    """An acks=all producer sending one 1 KiB record every 1/rate s straight to the brokers; each sample
    is (send time, latency as librdkafka measured it)."""

    bootstrap: str
    rate: float
    samples: list[tuple[float, float]] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Probe:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def _run(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": True}
        )
        payload = os.urandom(1024)

        def delivered(sent_at: float) -> Callable[[object, object], None]:
            def done(err: object, msg: object) -> None:
                if err is not None:
                    self.errors += 1
                else:
                    self.samples.append((sent_at, msg.latency()))  # type: ignore[attr-defined]

            return done

        interval = 1.0 / self.rate
        next_at = time.monotonic()
        i = 0
        while not self._stop.is_set():
            producer.produce(PROBE, value=payload, partition=i % 3, on_delivery=delivered(time.monotonic()))
            i += 1
            next_at += interval
            while (left := next_at - time.monotonic()) > 0:
                producer.poll(left)
        producer.flush(60)

    def window(self, start: float, end: float) -> list[float]:
        return [lat * 1000 for t, lat in self.samples if start <= t <= end]


# ---- bench state -----------------------------------------------------------------------------------
@dataclass
class Target:
    kind: str
    url: str
    flags: list[str]
    env: dict[str, str]
    options: dict[str, Any]


@dataclass
class Bench:
    ns: argparse.Namespace
    work: Path
    cluster: KafkaCluster
    results: Results
    probe: Probe
    history_end: int = 0
    """One past the last tiered offset: every offset below it is read in the history benchmarks."""
    direct: dict[str, list[float]] = field(default_factory=dict)

    def segment_files(self, topic: str) -> list[Path]:
        return sorted(
            p for n in self.cluster.node_ids for p in (self.cluster.log_dir(n) / f"{topic}-0").glob("*.log")
        )


def p99_window(ctx: Bench, bootstrap: str | None, label: str) -> dict[str, Any]:
    """The probe's latencies over ``--p99-seconds`` while 4 consumers read old data (none when
    ``bootstrap`` is None: the quiet reference)."""
    seconds = ctx.ns.p99_seconds
    child = None
    if bootstrap is not None:
        quarter = ctx.history_end // 4
        starts = [i * quarter for i in range(4)]
        child = consume_child(
            bootstrap, TOPIC, starts, [ctx.history_end] * 4, seconds=seconds + 2, wrap_from=0
        )
        time.sleep(2)  # the consumers joined and fetching
    begin = time.monotonic()
    time.sleep(seconds)
    end = time.monotonic()
    consumed = child_result(child) if child is not None else None
    lat = ctx.probe.window(begin, end)
    out = {
        "label": label,
        "samples": len(lat),
        "p50_ms": round(pct(lat, 0.5), 2),
        "p99_ms": round(pct(lat, 0.99), 2),
        "max_ms": round(max(lat), 2) if lat else None,
        "consumers_mib_s": None
        if consumed is None
        else round(sum(c["mib_s"] for c in consumed["consumers"]), 1),
    }
    log(f"p99 window {label}: {out}")
    return out


# ---- phases ---------------------------------------------------------------------------------------
def history_direct(ctx: Bench) -> None:
    """The issue's baseline: the same consumers reading the history topic itself before the trim."""
    warm(ctx.segment_files(TOPIC))
    cp, cf = [], []
    for r in range(ctx.ns.rounds):
        res = consumer_perf(ctx.cluster.bootstrap_servers, TOPIC, ctx.history_end)
        log(f"direct ConsumerPerformance (before the trim) round {r}: {res}")
        cp.append(res["mib_s"])
        res = confluent_read(ctx.cluster.bootstrap_servers, TOPIC, 0, ctx.history_end)
        log(f"direct confluent-kafka (before the trim) round {r}: {res}")
        cf.append(res["mib_s"])
    ctx.direct = {"consumer_perf": cp, "confluent": cf}
    ctx.results.detail["history_direct_before_trim"] = ctx.direct


def history_gateway(ctx: Bench, target: Target) -> None:
    """Gateway rounds, each beside a direct round of the same consumer on the twin topic (the same records,
    never trimmed, in page cache), order alternating: on a shared machine the load moves from minute to
    minute, and the ratio compares reads a few seconds apart."""
    rates: dict[str, list[float]] = {"cp_gw": [], "cp_twin": [], "cf_gw": [], "cf_twin": []}
    detail: dict[str, Any] = {}
    direct = ctx.cluster.bootstrap_servers
    with gateway(ctx, target, "history") as gw:
        cpu0 = gw.cpu_seconds()
        t0 = time.monotonic()
        for r in range(ctx.ns.rounds):
            warm(ctx.segment_files(TWIN))
            order = [("gw", gw.bootstrap, TOPIC), ("twin", direct, TWIN)]
            if r % 2:
                order.reverse()
            for name, server, topic in order:
                res = consumer_perf(server, topic, ctx.history_end)
                log(f"{target.kind} {name} ConsumerPerformance round {r}: {res}")
                rates[f"cp_{name}"].append(res["mib_s"])
            for name, server, topic in order:
                res = confluent_read(server, topic, 0, ctx.history_end)
                log(f"{target.kind} {name} confluent-kafka round {r}: {res}")
                rates[f"cf_{name}"].append(round(res["mib_s"], 1))
        cpu = gw.cpu_seconds() - cpu0
        detail["gateway_cpu_cores"] = round(cpu / (time.monotonic() - t0), 2)
        # Less sensitive to the machine's load than the rates: CPU the gateway spent per MiB it served
        # (both consumers, every round).
        served_mib = 2 * ctx.ns.rounds * ctx.history_end * RECORD_BYTES / MiB
        detail["gateway_cpu_ms_per_mib"] = round(cpu * 1000 / served_mib, 2)
        detail["gateway_peak_rss_mb"] = round(gw.status("VmHWM") / 1e6, 1)
    detail |= rates
    moto_note = ""
    if target.kind == "s3":
        get = moto_get_throughput(ctx, target)
        detail["moto_get_mib_s"] = get
        moto_note = f"; moto GET {get:.0f} MiB/s in the same run"
    ctx.results.detail[f"history_{target.kind}"] = detail
    for name, ours, twin, before in (
        ("ConsumerPerformance", rates["cp_gw"], rates["cp_twin"], ctx.direct.get("consumer_perf", [])),
        ("confluent-kafka consume()", rates["cf_gw"], rates["cf_twin"], ctx.direct.get("confluent", [])),
    ):
        ratio = median(ours) / median(twin)
        pre = f"; direct before the trim {median(before):.1f} MiB/s" if before else ""
        ctx.results.rows.append(
            Row(
                f"history {target.kind}:// {name}",
                f"direct {median(twin):.1f} MiB/s",
                f"gateway {median(ours):.1f} MiB/s",
                round(ratio, 2),
                f">= {HISTORY_GOAL}x",
                ratio >= HISTORY_GOAL,
                f"rounds {ours} vs {twin}{pre}{moto_note}; gateway CPU "
                f"{detail['gateway_cpu_ms_per_mib']} ms per MiB served",
            )
        )


def moto_get_throughput(ctx: Bench, target: Target) -> float:
    """Sequential 1 MiB ranged GETs of every tiered .log object, 4 in flight (the gateway's read-ahead)."""
    from concurrent.futures import ThreadPoolExecutor

    import s3fs

    fs = s3fs.S3FileSystem(**target.options)
    root = target.url.removeprefix("s3://")
    objects = [(p, int(fs.size(p))) for p in fs.find(root) if p.endswith(".log")]
    ranges = [(p, s, min(s + MiB, size)) for p, size in objects for s in range(0, size, MiB)]
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        total = sum(pool.map(lambda r: len(fs.cat_file(r[0], start=r[1], end=r[2])), ranges))
    rate = total / MiB / (time.monotonic() - started)
    log(f"moto GET: {total / MiB:.0f} MiB at {rate:.1f} MiB/s")
    return round(rate, 1)


def p99_case(ctx: Bench, target: Target | None) -> None:
    """Seed 000's test case 2; direct (target None) before the trim, through the gateway after."""
    key = "p99"
    windows: list[dict[str, Any]] = ctx.results.detail.setdefault(key, [])
    if target is None:
        windows.append(p99_window(ctx, None, "quiet (no consumers)"))
        windows.append(p99_window(ctx, ctx.cluster.bootstrap_servers, "4 consumers, broker disk"))
        return
    with gateway(ctx, target, "p99") as gw:
        windows.append(p99_window(ctx, gw.bootstrap, f"4 consumers, gateway from {target.kind}://"))
    by = {w["label"]: w for w in windows}
    direct = by["4 consumers, broker disk"]
    ours = by[f"4 consumers, gateway from {target.kind}://"]
    quiet = by["quiet (no consumers)"]
    ctx.results.rows.append(
        Row(
            "seed 000 case 2: acks=all p99 while 4 consumers read old data",
            f"broker disk {direct['p99_ms']} ms (consumers {direct['consumers_mib_s']} MiB/s)",
            f"gateway {ours['p99_ms']} ms (consumers {ours['consumers_mib_s']} MiB/s)",
            None,
            "reported",
            None,
            f"quiet p99 {quiet['p99_ms']} ms; {ctx.ns.probe_rate:.0f} records/s, "
            f"{ctx.ns.p99_seconds} s windows",
        )
    )


def rss_case(ctx: Bench, target: Target) -> None:
    n = ctx.ns.rss_consumers
    per = min(ctx.ns.rss_mib * MiB // RECORD_BYTES, ctx.history_end)
    step = max(1, (ctx.history_end - per) // max(1, n - 1))
    starts = [min(i * step, ctx.history_end - per) for i in range(n)]
    ends = [s + per for s in starts]
    detail: dict[str, Any] = {}
    with gateway(ctx, target, "rss") as gw:
        base = gw.status("VmRSS")
        with idle_connections(gw, ctx.ns.idle_connections) as idle:
            detail["idle"] = idle
            log(f"idle connections: { {k: v for k, v in idle.items() if k != 'socks'} }")
            peak = 0
            child = consume_child(gw.bootstrap, TOPIC, starts, ends)
            while child.poll() is None:
                peak = max(peak, gw.status("VmRSS"))
                time.sleep(0.2)
            consumed = child_result(child)
            idle |= check_idle(gw, idle)
            log(f"idle connections after the consumers: {idle}")
        hwm = gw.status("VmHWM")
        detail["consumers"] = {
            "count": n,
            "mib_each": round(per * RECORD_BYTES / MiB, 1),
            "aggregate_mib_s": round(
                sum(c["bytes"] for c in consumed["consumers"])
                / MiB
                / max(c["seconds"] for c in consumed["consumers"]),
                1,
            ),
            "rss_start_mb": round(base / 1e6, 1),
            "rss_peak_sampled_mb": round(peak / 1e6, 1),
            "vm_hwm_mb": round(hwm / 1e6, 1),
        }
        log(f"{n} consumers: {detail['consumers']}")
    ctx.results.detail["rss"] = detail
    c = detail["consumers"]
    ctx.results.rows.append(
        Row(
            f"gateway RSS, {n} consumers reading history at once ({target.kind}://), "
            f"{ctx.ns.idle_connections} idle connections held meanwhile",
            "-",
            f"peak {c['vm_hwm_mb']} MB (VmHWM), {c['aggregate_mib_s']} MiB/s together",
            None,
            "< 256 MB",
            hwm < RSS_GOAL,
            f"{c['mib_each']} MiB each from {n} places; RSS with the idle connections alone "
            f"{idle['rss_mb']} MB",
        )
    )
    ctx.results.rows.append(
        Row(
            f"{ctx.ns.idle_connections} idle client connections held",
            "-",
            f"{idle['held']} held to the end, RSS {idle['rss_mb']} MB, "
            f"a Metadata answered in {idle['metadata_s']} s",
            None,
            "held",
            idle["held"] == ctx.ns.idle_connections and idle["metadata_ok"],
            "each did an ApiVersions first (so each has its broker connection too)",
        )
    )


def _api_versions_frame(correlation_id: int) -> bytes:
    client = b"idle"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    return struct.pack(">i", len(body)) + body


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


@contextmanager
def idle_connections(gw: GatewayRun, count: int) -> Iterator[dict[str, Any]]:
    """``count`` connections that each did an ApiVersions and then stay open, idle."""
    socks: list[socket.socket] = []
    failed = 0
    started = time.monotonic()
    try:
        for i in range(count):
            try:
                s = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
                s.sendall(_api_versions_frame(i + 1))
                _read_frame(s)
                socks.append(s)
            except OSError:
                failed += 1
        opened = time.monotonic() - started
        time.sleep(2)
        state: dict[str, Any] = {
            "asked": count,
            "failed_to_open": failed,
            "open_seconds": round(opened, 1),
            "rss_mb": round(gw.status("VmRSS") / 1e6, 1),
            "socks": socks,
        }
        yield state
    finally:
        for s in socks:
            s.close()


def check_idle(gw: GatewayRun, state: dict[str, Any]) -> dict[str, Any]:
    """A Metadata through the gateway, and an ApiVersions on every held connection (each still open)."""
    t0 = time.monotonic()
    ok = True
    try:
        AdminClient({"bootstrap.servers": gw.bootstrap}).list_topics(timeout=30)
    except Exception:  # noqa: BLE001 - reported
        ok = False
    metadata_s = time.monotonic() - t0
    alive = 0
    for s in state.pop("socks"):
        try:
            s.sendall(_api_versions_frame(7))
            _read_frame(s)
            alive += 1
        except OSError:
            pass
    return {"held": alive, "metadata_ok": ok, "metadata_s": round(metadata_s, 2)}


def pass_through(ctx: Bench, target: Target) -> None:
    bootstrap = ctx.cluster.bootstrap_servers
    records = ctx.ns.pass_mib * MiB // RECORD_BYTES
    rf = min(3, ctx.ns.brokers)
    produce_rates: dict[str, list[float]] = {"direct": [], "gateway": []}
    consume_rates: dict[str, list[float]] = {"direct": [], "gateway": []}
    with gateway(ctx, target, "pass") as gw:
        for r in range(ctx.ns.rounds):
            order = [("direct", bootstrap), ("gateway", gw.bootstrap)]
            if r % 2:
                order.reverse()
            for name, server in order:
                topic = f"{LIVE}-{r}-{name}"
                create_topic(bootstrap, topic, 1, rf, **{"min.insync.replicas": str(min(2, rf))})
                ctx.cluster.wait_topic(topic, 1)
                out = java_tool(
                    "org.apache.kafka.tools.ProducerPerformance",
                    "--topic",
                    topic,
                    "--num-records",
                    str(records),
                    "--record-size",
                    str(RECORD_BYTES),
                    "--throughput",
                    "-1",
                    "--producer-props",
                    f"bootstrap.servers={server}",
                    "acks=all",
                    "linger.ms=5",
                    "batch.size=262144",
                )
                last = [line for line in out.splitlines() if "records sent" in line][-1]
                mib_s = float(last.split("(")[1].split()[0])
                produce_rates[name].append(mib_s)
                log(f"pass-through produce {name} round {r}: {last}")
            for name, server in order:
                res = consumer_perf(server, f"{LIVE}-{r}-direct", records)
                consume_rates[name].append(res["mib_s"])
                log(f"pass-through consume {name} round {r}: {res}")
    ctx.results.detail["pass_through"] = {"produce": produce_rates, "consume": consume_rates}
    for what, rates, tool in (
        ("produce acks=all", produce_rates, "ProducerPerformance"),
        ("consume local data", consume_rates, "ConsumerPerformance"),
    ):
        ratio = median(rates["gateway"]) / median(rates["direct"])
        ctx.results.rows.append(
            Row(
                f"pass-through {what} ({tool})",
                f"direct {median(rates['direct']):.1f} MiB/s",
                f"gateway {median(rates['gateway']):.1f} MiB/s",
                round(ratio, 2),
                f">= {PASS_GOAL}x",
                ratio >= PASS_GOAL,
                f"rounds {rates['gateway']} vs {rates['direct']}",
            )
        )


# ---- targets ---------------------------------------------------------------------------------------
def make_targets(ctx: Bench, kinds: list[str], moto: MotoServer | None) -> list[Target]:
    out = []
    for kind in kinds:
        if kind == "file":
            url = f"file://{ctx.work / 'tier'}"
            out.append(Target("file", url, ["--remote", url], {}, {}))
        else:
            import s3fs

            assert moto is not None
            options = moto.storage_options()
            bucket = f"gw-{uuid.uuid4().hex[:8]}"
            s3fs.S3FileSystem(**options).mkdir(bucket)
            url = f"s3://{bucket}/tier"
            out.append(
                Target(
                    "s3",
                    url,
                    ["--remote", url, "--endpoint-url", moto.endpoint_url, "--path-style"],
                    {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]},
                    options,
                )
            )
    return out


def tier(ctx: Bench, target: Target) -> None:
    for node in ctx.cluster.node_ids:
        copied = run_cli(
            "copy",
            "--log-dir",
            str(ctx.cluster.log_dir(node)),
            "--bootstrap-servers",
            ctx.cluster.bootstrap_servers,
            "--topic",
            TOPIC,
            *target.flags,
            env=target.env,
            timeout=3600,
        )
        if copied.returncode != 0:
            raise RuntimeError(f"copy from broker {node} to {target.kind} failed: {copied.stderr}")


def trim(ctx: Bench, target: Target) -> None:
    cleaned = run_cli(
        "cleanup",
        "--bootstrap-servers",
        ctx.cluster.bootstrap_servers,
        "--topic",
        TOPIC,
        "--local-retention-bytes",
        "0",
        *target.flags,
        env=target.env,
        timeout=600,
    )
    if cleaned.returncode != 0:
        raise RuntimeError(f"cleanup failed: {cleaned.stderr}")
    deadline = time.monotonic() + 120
    while watermarks(ctx.cluster.bootstrap_servers, TOPIC, 1)[0][0] < ctx.history_end:
        if time.monotonic() > deadline:
            raise RuntimeError("the brokers' log start did not reach the tier's end")
        time.sleep(1)


# ---- report ----------------------------------------------------------------------------------------
def print_summary(results: Results) -> None:
    print("\n| benchmark | baseline | gateway | ratio | goal | met | notes |")
    print("|---|---|---|---|---|---|---|")
    for r in results.rows:
        met = "-" if r.met is None else ("yes" if r.met else "**no**")
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        print(f"| {r.benchmark} | {r.baseline} | {r.ours} | {ratio} | {r.goal} | {met} | {r.notes} |")
    print(f"\nmachine: {results.machine}\ndata: {results.data}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--consume-child", help=argparse.SUPPRESS)
    parser.add_argument(
        "--size-mib", type=int, default=1024, help="history to produce and tier (default 1024)"
    )
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--targets", default="file,s3", help="comma-separated: file, s3")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pass-mib", type=int, default=256, help="pass-through data per round")
    parser.add_argument("--rss-consumers", type=int, default=16)
    parser.add_argument("--rss-mib", type=int, default=64, help="history each RSS-phase consumer reads")
    parser.add_argument("--idle-connections", type=int, default=1000)
    parser.add_argument("--p99-seconds", type=float, default=20.0)
    parser.add_argument("--probe-rate", type=float, default=100.0)
    parser.add_argument(
        "--skip", default="", help="comma-separated phases to leave out: history, p99, rss, pass"
    )
    parser.add_argument(
        "--gateway-arg", action="append", default=[], help="extra `tierkeeper gateway` argument (repeatable)"
    )
    parser.add_argument(
        "--gateway-env", action="append", default=[], metavar="K=V", help="environment of the gateway"
    )
    parser.add_argument("--profile", type=Path, help="run each gateway under cProfile, profiles to this dir")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true")
    ns = parser.parse_args()
    if ns.consume_child:
        _consume_main(json.loads(ns.consume_child))
        return 0
    skip = set(filter(None, ns.skip.split(",")))
    if ns.profile:
        ns.profile.mkdir(parents=True, exist_ok=True)
    kinds = [k for k in ns.targets.split(",") if k]
    work = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    results = Results(machine_notes())
    cluster = KafkaCluster(work / "kafka", brokers=ns.brokers, heap="1g", quick_start=False)
    moto: MotoServer | None = None
    probe: Probe | None = None
    try:
        log(f"starting {ns.brokers} Kafka brokers in {work}")
        cluster.start()
        if "s3" in kinds:
            moto = MotoServer(work / "moto").start()
        rf = min(3, ns.brokers)
        for name in (TOPIC, TWIN):
            create_topic(
                cluster.bootstrap_servers, name, 1, 1, **{"segment.bytes": str(ns.segment_mib * MiB)}
            )
        create_topic(cluster.bootstrap_servers, PROBE, 3, rf, **{"min.insync.replicas": str(min(2, rf))})
        cluster.wait_topic(TOPIC, 1)
        cluster.wait_topic(TWIN, 1)
        cluster.wait_topic(PROBE, 3)
        log(f"producing {ns.size_mib} MiB of {RECORD_BYTES}-byte records")
        t0 = time.monotonic()
        records = produce(cluster.bootstrap_servers, TOPIC, ns.size_mib * MiB)
        produce_s = time.monotonic() - t0
        log("producing the same records into the twin topic (the direct baseline after the trim)")
        produce(cluster.bootstrap_servers, TWIN, ns.size_mib * MiB)
        # Roll the last full segment: one more segment's worth would double the data, so the copy tiers
        # every rolled segment and the active one stays on the broker (the "tail").
        probe = Probe(cluster.bootstrap_servers, ns.probe_rate).start()
        ctx = Bench(ns, work, cluster, results, probe)
        targets = make_targets(ctx, kinds, moto)
        for target in targets:
            log(f"tiering to {target.url}")
            tier(ctx, target)
        # The tier's end: what `cleanup` will trim below is the first offset of the active segment.
        segs = sorted((cluster.log_dir(n) / f"{TOPIC}-0" for n in cluster.node_ids), key=str)
        bases = sorted(int(p.stem) for d in segs if d.exists() for p in d.glob("*.log"))
        ctx.history_end = bases[-1]
        results.data = {
            "records": records,
            "record_bytes": RECORD_BYTES,
            "history_records": ctx.history_end,
            "history_mib": round(ctx.history_end * RECORD_BYTES / MiB, 1),
            "segment_mib": ns.segment_mib,
            "produce_seconds": round(produce_s, 1),
            "brokers": ns.brokers,
            "targets": [t.url for t in targets],
        }
        log(f"data: {results.data}")
        if "history" not in skip:
            history_direct(ctx)
        if "p99" not in skip:
            p99_case(ctx, None)
        log("trimming the brokers behind the tier")
        trim(ctx, targets[0])
        for target in targets:
            if "history" not in skip:
                history_gateway(ctx, target)
        file_target = next((t for t in targets if t.kind == "file"), targets[0])
        if "p99" not in skip:
            p99_case(ctx, file_target)
        if "rss" not in skip:
            rss_case(ctx, file_target)
        if "pass" not in skip:
            pass_through(ctx, file_target)
        results.machine["loadavg_end"] = os.getloadavg()
    finally:
        if probe is not None:
            probe.stop()
        cluster.stop()
        if moto is not None:
            moto.stop()
        if not ns.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    print_summary(results)
    if ns.json:
        ns.json.write_text(json.dumps(asdict(results), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
