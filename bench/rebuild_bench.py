"""Broker rebuild benchmark (seed 000, test case 3): rebuild from the remote tier vs plain replication.

    PYTHONPATH=.:tests .venv/bin/python bench/rebuild_bench.py --gib 4 --partitions 6

A real 3-broker Kafka 4.1 cluster on this machine. One topic (RF 3) holds ``--gib`` GiB, tiered with
``tierkeeper copy`` to a file:// remote tier. Broker 3 is then rebuilt twice from an empty log dir
(meta.properties only), with the same data:

- plain: start it and let it replicate everything from the leaders (full local retention);
- tiered: ``tierkeeper rebuild --local-retention-bytes <5% of a partition>``, then start it, so it
  replicates only the untiered tail.

Time to full ISR is measured from the first action (broker start, or the rebuild command) until the
Admin API lists broker 3 in the ISR of every partition. Meanwhile a probe producer (acks=all, 1 KiB
records at ``--probe-rate``/s on its own RF-3 topic) records per-record latency; its p99 in each
window is compared with a quiet window of the healthy cluster before. Prints markdown; exits 1 when a
target is missed (>= 10x faster, p99 during the tiered rebuild within 1.5x of normal).

``--tiered-rounds N`` repeats the tiered rebuild and judges the p99 on the pooled samples (one 7-s window
holds too few records for a stable p99). ``--rebuilt-nice N`` starts broker 3 and the rebuild command at
a lower CPU priority, modelling the replaced broker on its own machine; results with it say so.
``--rebuilt-own-cpu`` confines broker 3 and the rebuild command to CPU 1 and everything else to CPU 0.
``--rebuilt-own-fs`` (root only) gives broker 3's log dir a filesystem of its own, an ext4 image on a loop
device with direct I/O, as a replaced broker has its own disk: its writes and fsyncs then no longer wait
in the same ext4 journal as the leaders' appends (the disk itself is still shared).
``--init-container`` runs the tiered restore as a broker pod's init container does (docs/rebuild.md):
``tierkeeper rebuild --if-empty --settings FILE --broker-id-from-pod-name kafka-3`` with the settings file
the operator renders for the cluster (``storage_core.api.rebuild_settings``), broker 3 started only once
it exited 0, as a kubelet starts the main container.
``--low-disk`` fits a larger ``--gib`` on the same disk (peak ~3.05x instead of 4x): broker 3 stays
stopped and empty while the data is produced (two replicas) and tiered, the tiered rebuild runs first,
and the remote tier is deleted before the plain rebuild (which does not read it); the normal window
then lies between the two rebuilds, with the cluster healthy.
``--trace FILE`` writes the probe samples, phase boundaries and the per-thread CPU of every broker JVM
(``bench/thread_cpu.py``) for ``bench/rebuild_trace.py``. Experiments: ``--warm-leader-tails`` reads the
data broker 3 will fetch into the leaders' page cache first; ``--hold-rejoin S`` keeps broker 3's
replication throttled to ~0 for S seconds after it registers (Kafka's leader-side replication quota).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from thread_cpu import ThreadCpuSampler

from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_admin import KafkaAdmin

TOPIC, PROBE = "bench", "probe"
REBUILT = 3
POOL = 8 << 20


@dataclass
class Probe:
    """An acks=all producer sending one record every 1/rate s. Each sample is (send time, latency as
    librdkafka measured it), so a record belongs to the window it was sent in."""

    bootstrap: str
    rate: float
    samples: list[tuple[float, float]] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def _run(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "linger.ms": 0,
                "enable.idempotence": True,
                "log_level": 2,
            }
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
            now = time.monotonic()
            producer.produce(PROBE, value=payload, partition=i % 3, on_delivery=delivered(now))
            i += 1
            next_at += interval
            while (left := next_at - time.monotonic()) > 0:
                producer.poll(left)
        producer.flush(60)

    def window(self, start: float, end: float) -> list[float]:
        return [lat * 1000 for t, lat in self.samples if start <= t <= end]


@dataclass
class CpuSampler:
    """Once a second: cores busy machine-wide, and how many of them this benchmark's processes (the
    brokers, the CLI runs, the probe) used. The rest is other people's load on a shared machine."""

    samples: list[tuple[float, float, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        seen: dict[int, float] = {}

        def ours() -> float:
            for proc in [me, *me.children(recursive=True)]:
                try:
                    t = proc.cpu_times()
                    seen[proc.pid] = t.user + t.system
                except psutil.Error:
                    pass
            # A finished process keeps its last value (its final fraction of a second is lost).
            return sum(seen.values())

        def busy() -> float:
            t = psutil.cpu_times()
            return sum(t) - t.idle - getattr(t, "iowait", 0.0)

        last_t, last_busy, last_ours = time.monotonic(), busy(), ours()
        while not self._stop.wait(1.0):
            now, b, o = time.monotonic(), busy(), ours()
            span = now - last_t
            self.samples.append((now, (b - last_busy) / span, (o - last_ours) / span))
            last_t, last_busy, last_ours = now, b, o

    def foreign(self, start: float, end: float) -> float:
        inside = [b - o for t, b, o in self.samples if start <= t <= end + 1]
        return max(0.0, statistics.fmean(inside)) if inside else float("nan")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def worst_second_p99(values_with_time: list[tuple[float, float]], start: float, end: float) -> float:
    """The highest p99 over any 1-second slice of the window (the seed's "max avg P99")."""
    buckets: dict[int, list[float]] = {}
    for t, lat in values_with_time:
        if start <= t <= end:
            buckets.setdefault(int(t - start), []).append(lat * 1000)
    return max((pct(v, 0.99) for v in buckets.values() if len(v) >= 10), default=float("nan"))


def produce_bulk(bootstrap: str, total: int, partitions: int) -> float:
    rng = random.Random(405)
    pool = rng.randbytes(POOL)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "none",
            "queue.buffering.max.kbytes": 262144,
            "log_level": 2,
        }
    )
    started = time.monotonic()
    sent = count = 0
    size = 4000
    while sent < total:
        start = (count * 7919) % (POOL - size)
        while True:
            try:
                producer.produce(TOPIC, value=pool[start : start + size], partition=count % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        sent += size
        if count % 5000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    return time.monotonic() - started


def wait_full_isr(admin: KafkaAdmin, deadline_s: float = 3600) -> float:
    started = time.monotonic()
    while True:
        described = admin.describe([TOPIC, PROBE])
        if all(REBUILT in info.isr for info in described.values()):
            return time.monotonic()
        if time.monotonic() - started > deadline_s:
            raise RuntimeError("broker 3 never rejoined the ISR")
        time.sleep(0.2)


class TieredRound(NamedTuple):
    start: float
    rebuilt: float
    started: float
    end: float  # full ISR
    summary: dict[str, Any]
    restored_bytes: int
    tail_bytes: int


def _labelled_pids(cluster: KafkaCluster) -> dict[str, int]:
    """The brokers' JVMs and this process, for the per-thread CPU trace."""
    pids = {"bench": os.getpid()}
    for node in cluster.node_ids:
        pid = cluster.pid(node)
        if pid is not None:
            pids[f"broker {node}"] = pid
    return pids


def warm_leader_tails(cluster: KafkaCluster) -> int:
    """Read into the page cache what broker 3 will fetch from brokers 1 and 2: every file of the probe
    topic (never tiered, so replicated from offset 0) and the newest two segments of each bench partition.
    An experiment: it tells whether the rejoin stall comes from the leaders reading that data from disk."""
    read = 0
    for broker in (1, 2):
        for pdir in cluster.log_dir(broker).iterdir():
            if pdir.name.startswith(f"{PROBE}-"):
                files = [f for f in pdir.iterdir() if f.is_file()]
            elif pdir.name.startswith(f"{TOPIC}-"):
                files = sorted(pdir.glob("*.log"))[-2:]
            else:
                continue
            for path in files:
                with path.open("rb", buffering=0) as f:
                    while chunk := f.read(1 << 20):
                        read += len(chunk)
    return read


def hold_replication(bootstrap: str, hold: bool) -> None:
    """Experiment: throttle (``hold``) or release, on the leaders (brokers 1 and 2), what every out-of-sync
    follower of the two topics may fetch, with Kafka's own replication quota (1 byte/s; in-sync replicas
    are never throttled), so that a restarted broker gets next to nothing and stays out of the ISRs."""
    op = AlterConfigOpType.SET if hold else AlterConfigOpType.DELETE
    resources = [
        ConfigResource(
            ResourceType.BROKER,
            str(leader),
            incremental_configs=[
                ConfigEntry(
                    "leader.replication.throttled.rate", "1" if hold else None, incremental_operation=op
                )
            ],
        )
        for leader in (1, 2)
    ]
    resources += [
        ConfigResource(
            ResourceType.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(
                    "leader.replication.throttled.replicas", "*" if hold else None, incremental_operation=op
                )
            ],
        )
        for topic in (TOPIC, PROBE)
    ]
    client = AdminClient({"bootstrap.servers": bootstrap})
    for resource in resources:  # the client takes one broker resource per call
        for fut in client.incremental_alter_configs([resource]).values():
            fut.result(30)


def tiered_round(
    cluster: KafkaCluster,
    admin: KafkaAdmin,
    remote: str,
    window: int,
    nice: int,
    cpus: str | None,
    warm: bool,
    hold_s: float = 0.0,
    settings: Path | None = None,
) -> TieredRound:
    """Stop and wipe broker 3, rebuild it from the remote tier, start it, wait for full ISR.
    ``settings``: run the restore as the init container does, with this settings file."""
    cluster.stop_broker(REBUILT)
    cluster.wipe_log_dir(REBUILT)
    start = time.monotonic()
    if settings is not None:
        where = ["--if-empty", "--settings", str(settings), "--broker-id-from-pod-name", f"kafka-{REBUILT}"]
        where += ["--result-file", str(settings.with_name("result.json"))]
    else:
        where = ["--log-dir", str(cluster.log_dir(REBUILT)), "--bootstrap-servers", cluster.bootstrap_servers]
        where += ["--broker-id", str(REBUILT), "--remote", remote, "--parallelism", "4"]
    out = cli("rebuild", *where, "--local-retention-bytes", str(window), "--json", nice=nice, cpus=cpus)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    summary = json.loads(out.stdout)
    rebuilt = time.monotonic()
    restored = dir_bytes(cluster.log_dir(REBUILT))
    if warm:
        warm_start = time.monotonic()
        warmed = warm_leader_tails(cluster)
        print(
            f"warmed {warmed / 2**20:.0f} MiB of the leaders' tails in {time.monotonic() - warm_start:.2f} s",
            file=sys.stderr,
        )
    if hold_s:
        hold_replication(cluster.bootstrap_servers, True)
    cluster.start_broker(REBUILT, nice=nice)
    started = time.monotonic()
    if hold_s:
        time.sleep(hold_s)
        hold_replication(cluster.bootstrap_servers, False)
        print(
            f"released the rebuilt broker's replication {hold_s:.0f} s after it registered", file=sys.stderr
        )
    end = wait_full_isr(admin)
    tail = dir_bytes(cluster.log_dir(REBUILT)) - restored
    time.sleep(5)
    return TieredRound(start, rebuilt, started, end, summary, restored, tail)


def init_settings(cluster: KafkaCluster, remote: str) -> Path:
    """The settings file the operator renders for this cluster (its ConfigMap, as the pod mounts it)."""
    from storage_core.api.cluster import KafkaClusterConfig
    from storage_core.api.rebuild_settings import dump_settings, render_settings
    from storage_core.api.resources import TieredBrokerSpec

    config = KafkaClusterConfig.model_validate(
        {"name": "bench", "bootstrapServers": cluster.bootstrap_servers, "remote": {"url": remote}}
    )
    brokers = [
        (
            f"broker-{n}",
            TieredBrokerSpec.model_validate(
                {
                    "clusterRef": {"name": "bench"},
                    "brokerId": n,
                    "logDir": {"path": str(cluster.log_dir(n))},
                    "rebuild": {"policy": "WhenLogDirEmpty", "parallelism": 4},
                }
            ),
        )
        for n in cluster.node_ids
    ]
    path = cluster.workdir.parent / "rebuild-settings" / "settings.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(dump_settings(render_settings(config, brokers)))
    return path


@contextlib.contextmanager
def own_filesystem(mount_point: Path, image: Path, size: int) -> Iterator[None]:
    """Mount a fresh ext4 filesystem of ``size`` bytes (a sparse image on a loop device) at ``mount_point``.

    Direct I/O keeps the image's blocks out of the outer filesystem's page cache and journal; ``discard``
    returns deleted space to the outer disk, so wiping the log dir between rounds frees it.
    """

    def run(*cmd: str) -> str:
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()

    with open(image, "wb") as f:
        f.truncate(size)
    run("mkfs.ext4", "-q", "-F", "-E", "nodiscard", str(image))
    device = run("losetup", "--find", "--show", "--direct-io=on", str(image))
    try:
        mount_point.mkdir(parents=True, exist_ok=True)
        run("mount", "-o", "discard", device, str(mount_point))
        try:
            (mount_point / "lost+found").rmdir()  # Kafka refuses a log dir entry that is not a partition
            yield
        finally:
            subprocess.run(["umount", str(mount_point)], check=False)
    finally:
        subprocess.run(["losetup", "-d", device], check=False)
        image.unlink(missing_ok=True)


def dump_jfr(cluster: KafkaCluster, into: Path) -> None:
    for node_id in cluster.node_ids:
        found = subprocess.run(
            ["pgrep", "-f", f"node-{node_id}/server.properties"], capture_output=True, text=True, check=False
        ).stdout.split()
        for pid in found:
            subprocess.run(
                ["jcmd", pid, "JFR.dump", "name=tk", f"filename={into / f'node-{node_id}.jfr'}"],
                capture_output=True,
                check=False,
            )


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.log") if f.is_file())


def cli(*args: str, nice: int = 0, cpus: str | None = None) -> subprocess.CompletedProcess[str]:
    prefix = ["nice", "-n", str(nice)] if nice else []
    if cpus is not None:
        prefix = ["taskset", "-c", cpus, *prefix]
    return subprocess.run(
        [*prefix, sys.executable, "-m", "storage_core.cli", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=4.0, help="data in the benchmark topic (per replica)")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument(
        "--window", type=float, default=0.05, help="local window as a fraction of a partition"
    )
    parser.add_argument("--probe-rate", type=float, default=200.0, help="probe records per second")
    parser.add_argument("--segment-mib", type=int, default=4, help="segment.bytes of the topic, in MiB")
    parser.add_argument("--quiet-seconds", type=float, default=30.0, help="length of the normal window")
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=30.0,
        help="pause after loading and tiering before the normal window (flushes, GC)",
    )
    parser.add_argument(
        "--rebuilt-nice",
        type=int,
        default=0,
        help="niceness of broker 3's JVM (both rebuilds) and of the rebuild command: models "
        "the replaced broker on its own machine, whose start does not take the leaders' CPU",
    )
    parser.add_argument(
        "--rebuilt-own-cpu",
        action="store_true",
        help="broker 3's JVM and the rebuild command on CPU 1 only, everything else (brokers 1 "
        "and 2, this process, the probe) on CPU 0: the replaced broker on a core of its own",
    )
    parser.add_argument(
        "--rebuilt-own-fs",
        action="store_true",
        help="broker 3's log dir on a filesystem of its own (loop-mounted ext4 image; root only)",
    )
    parser.add_argument(
        "--tiered-rounds",
        type=int,
        default=1,
        help="repeat the tiered rebuild; the p99 target is judged on the pooled samples",
    )
    parser.add_argument(
        "--broker-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra broker setting for all three brokers (repeatable); default: Kafka's defaults",
    )
    parser.add_argument(
        "--jfr",
        type=Path,
        default=None,
        metavar="DIR",
        help="record every broker JVM with Java Flight Recorder (profile settings) and dump the "
        "recordings into DIR before the cluster is stopped",
    )
    parser.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="write every probe sample and the phase boundaries here (JSON, wall-clock seconds), "
        "to line latency spikes up with broker logs and vmstat",
    )
    parser.add_argument(
        "--warm-leader-tails",
        action="store_true",
        help="experiment: before each tiered start, read the probe topic and the newest bench "
        "segments of brokers 1 and 2 into the page cache",
    )
    parser.add_argument(
        "--hold-rejoin",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="experiment: keep the rebuilt broker's replication throttled to ~0 for SECONDS after it "
        "registers (its JVM warms up outside the ISRs), then release it. In the one run made, "
        "every acks=all produce waited for the whole hold (docs/benchmarks.md)",
    )
    parser.add_argument(
        "--init-container",
        action="store_true",
        help="run the tiered restore as the broker pod's init container does (--if-empty --settings)",
    )
    parser.add_argument(
        "--low-disk",
        action="store_true",
        help="peak disk ~3.05x --gib instead of 4x: broker 3 is stopped and empty while the data is "
        "produced and tiered, the tiered rebuild runs first, and the remote tier is deleted before the "
        "plain rebuild; the normal window lies between the two rebuilds",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rebuild-bench-"))
    total = int(args.gib * (1 << 30))
    if args.rebuilt_own_cpu:
        os.sched_setaffinity(0, {0})  # inherited by the probe's and sampler's threads and by brokers 1-2
    if args.jfr is not None:
        args.jfr.mkdir(parents=True, exist_ok=True)
        # Read by every JVM the harness starts; the brokers are killed at the end, so dump_jfr saves them.
        os.environ["JAVA_TOOL_OPTIONS"] = "-XX:StartFlightRecording=name=tk,settings=profile"
    broker_config = dict(item.split("=", 1) for item in args.broker_config)
    cluster = KafkaCluster(
        workdir / "kafka",
        brokers=3,
        heap="1g",
        broker_config=broker_config,
        cpus={1: "0", 2: "0", REBUILT: "1"} if args.rebuilt_own_cpu else {},
        quick_start=False,
    )
    remote = f"file://{workdir / 'remote'}"
    try:
        with contextlib.ExitStack() as mounts:
            if args.rebuilt_own_fs:
                mounts.enter_context(
                    own_filesystem(
                        cluster.log_dir(REBUILT), workdir / "broker3.img", int(total * 1.5) + (4 << 30)
                    )
                )
            return run_benchmark(args, total, cluster, remote, CpuSampler())
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def run_benchmark(
    args: argparse.Namespace, total: int, cluster: KafkaCluster, remote: str, cpu: CpuSampler
) -> int:
    probe: Probe | None = None
    threads = ThreadCpuSampler(lambda: _labelled_pids(cluster))
    try:
        cpu.start()
        if args.trace is not None:
            threads.start()
        cluster.start()
        admin_client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        config = {"segment.bytes": str(args.segment_mib << 20), "retention.ms": "-1", "retention.bytes": "-1"}
        for fut in admin_client.create_topics(
            [NewTopic(TOPIC, args.partitions, 3, config=config), NewTopic(PROBE, 3, 3)]
        ).values():
            fut.result(60)
        admin = KafkaAdmin(cluster.bootstrap_servers)
        if args.low_disk:
            # Broker 3 holds nothing while the data is produced and tiered, so the disk never holds three
            # replicas and the remote tier at once (see --low-disk).
            cluster.stop_broker(REBUILT)
            cluster.wipe_log_dir(REBUILT)
        produce_s = produce_bulk(cluster.bootstrap_servers, total, args.partitions)
        print(f"produced {total / 2**30:.2f} GiB in {produce_s:.1f} s", file=sys.stderr)
        copied = time.monotonic()
        out = cli(
            "copy",
            "--log-dir",
            str(cluster.log_dir(1)),
            "--bootstrap-servers",
            cluster.bootstrap_servers,
            "--remote",
            remote,
            "--topic",
            TOPIC,
            "--json",
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr)
        tiered = json.loads(out.stdout)
        print(
            f"tiered {tiered['copied_bytes'] / 2**30:.2f} GiB in {time.monotonic() - copied:.1f} s",
            file=sys.stderr,
        )

        probe = Probe(cluster.bootstrap_servers, args.probe_rate)
        probe.start()
        time.sleep(args.settle_seconds)  # the bulk load's flushes and the copy's reads die down first

        def tiered_rounds() -> list[TieredRound]:
            # Rebuild from the remote tier with a 5% local window; extra rounds only add probe samples.
            window = int(args.window * total / args.partitions)
            return [
                tiered_round(
                    cluster,
                    admin,
                    remote,
                    window,
                    args.rebuilt_nice,
                    cluster.cpus.get(REBUILT),
                    args.warm_leader_tails,
                    args.hold_rejoin,
                    init_settings(cluster, remote) if args.init_container else None,
                )
                for _ in range(args.tiered_rounds)
            ]

        if args.low_disk:
            rounds = tiered_rounds()
            time.sleep(10)
            shutil.rmtree(remote.removeprefix("file://"))  # the plain rebuild does not read it
        normal = (time.monotonic(), time.monotonic() + args.quiet_seconds)
        time.sleep(args.quiet_seconds)

        # Plain replication with full local retention.
        cluster.stop_broker(REBUILT)
        cluster.wipe_log_dir(REBUILT)
        plain_start = time.monotonic()
        cluster.start_broker(REBUILT, nice=args.rebuilt_nice)
        plain_up = time.monotonic()
        plain_end = wait_full_isr(admin)
        plain_bytes = dir_bytes(cluster.log_dir(REBUILT))
        time.sleep(10)

        if not args.low_disk:
            rounds = tiered_rounds()
        tiered_start, rebuilt_at, tiered_up, tiered_end, summary, restored_bytes, tail_bytes = rounds[0]
        after = (time.monotonic(), time.monotonic() + args.quiet_seconds)
        time.sleep(args.quiet_seconds)
        probe.stop()

        plain_s, tiered_s = plain_end - plain_start, tiered_end - tiered_start
        windows = {
            "normal (healthy cluster, before)": normal,
            "plain rebuild: broker start": (plain_start, plain_up),
            "plain rebuild: catch-up": (plain_up, plain_end),
            "**plain rebuild, whole**": (plain_start, plain_end),
            "tiered rebuild: restore command": (tiered_start, rebuilt_at),
            "tiered rebuild: broker start": (rebuilt_at, tiered_up),
            "tiered rebuild: catch-up": (tiered_up, tiered_end),
            "**tiered rebuild, whole**": (tiered_start, tiered_end),
            "normal (after)": after,
        }
        base_p99 = pct(probe.window(*normal), 0.99)
        if args.trace is not None:
            wall = (
                time.time() - time.monotonic()
            )  # monotonic -> wall clock, as broker logs and vmstat print it
            args.trace.write_text(
                json.dumps(
                    {
                        "samples": [(t + wall, lat) for t, lat in probe.samples],
                        "windows": {name: (a + wall, b + wall) for name, (a, b) in windows.items()},
                        "rounds": [
                            {
                                "start": r.start + wall,
                                "rebuilt": r.rebuilt + wall,
                                "started": r.started + wall,
                                "end": r.end + wall,
                            }
                            for r in rounds
                        ],
                        "threads": threads.samples,
                    }
                )
            )
        print(
            f"## Broker rebuild: {args.gib:g} GiB in {args.partitions} partitions ({args.segment_mib} MiB "
            f"segments), RF 3, 3 brokers, rebuilt broker at nice {args.rebuilt_nice}"
            + (", on a core of its own" if args.rebuilt_own_cpu else "")
            + "".join(f", {item}" for item in args.broker_config)
            + (", on a filesystem of its own" if args.rebuilt_own_fs else "")
            + (", tiered restore through the init container's command" if args.init_container else "")
            + (", leaders' tails warmed before each tiered start" if args.warm_leader_tails else "")
            + (f", replication held {args.hold_rejoin:g} s after registering" if args.hold_rejoin else "")
            + (
                ", low-disk order (tiered rebuild first, remote tier deleted before the plain one)"
                if args.low_disk
                else ""
            )
            + "\n"
        )
        print(
            "| rebuild | time to full ISR | rebuild command | broker start to registered | "
            "registered to full ISR | .log bytes fetched from leaders |"
        )
        print("|---|---|---|---|---|---|")
        print(
            "| plain replication, full local retention "
            f"| {plain_s:.1f} s | - | {plain_up - plain_start:.1f} s | "
            f"{plain_end - plain_up:.1f} s | {plain_bytes / 2**20:.0f} MiB |"
        )
        print(
            f"| tierkeeper rebuild, {args.window:.0%} local window | {tiered_s:.1f} s | "
            f"{rebuilt_at - tiered_start:.1f} s ({summary['downloaded_bytes'] / 2**20:.0f} MiB restored) | "
            f"{tiered_up - rebuilt_at:.1f} s | {tiered_end - tiered_up:.1f} s "
            f"| {tail_bytes / 2**20:.0f} MiB |"
        )
        ratio = plain_s / tiered_s
        catch_up_ratio = (plain_end - plain_up) / max(1e-3, tiered_end - tiered_up)
        print(
            f"\nSpeed-up to full ISR: **{ratio:.1f}x** (target >= 10x); catch-up phase alone: "
            f"{catch_up_ratio:.0f}x\n"
        )
        print(
            "| probe window (acks=all, 1 KiB) | seconds | records | p50 ms | p99 ms | worst 1-s p99 ms | "
            "p99 vs normal | other load (cores) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name, (start, end) in windows.items():
            lat = probe.window(start, end)
            print(
                f"| {name} | {end - start:.1f} | {len(lat)} | {pct(lat, 0.5):.1f} | {pct(lat, 0.99):.1f} | "
                f"{worst_second_p99(probe.samples, start, end):.1f} | {pct(lat, 0.99) / base_p99:.2f}x | "
                f"{cpu.foreign(start, end):.2f} |"
            )
        pooled = [lat for r in rounds for lat in probe.window(r.start, r.end)]
        tiered_p99 = pct(pooled, 0.99)
        if len(rounds) > 1:
            print(
                f"\ntiered rebuild repeated {len(rounds)} times: time to full ISR "
                + ", ".join(f"{r.end - r.start:.1f}" for r in rounds)
                + " s; p99 per round "
                + ", ".join(f"{pct(probe.window(r.start, r.end), 0.99):.1f}" for r in rounds)
                + f" ms; pooled ({len(pooled)} records): "
                f"p50 {pct(pooled, 0.5):.1f} ms, p99 {tiered_p99:.1f} ms "
                f"= {tiered_p99 / base_p99:.2f}x normal"
            )
        print(
            f"\nprobe errors: {probe.errors}; mean latency overall "
            f"{statistics.fmean(lat * 1000 for _, lat in probe.samples):.1f} ms"
        )
        ok = ratio >= 10 and tiered_p99 <= 1.5 * base_p99
        print(
            f"\ntargets: speed-up {'met' if ratio >= 10 else 'MISSED'}; tiered p99 within 1.5x of normal "
            f"{'met' if tiered_p99 <= 1.5 * base_p99 else 'MISSED'}"
        )
        return 0 if ok else 1
    finally:
        cpu.stop()
        threads.stop()
        if probe is not None:
            probe.stop()
        if args.jfr is not None:
            dump_jfr(cluster, args.jfr)
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
