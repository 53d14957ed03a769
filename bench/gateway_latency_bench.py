"""What the gateway costs on the hot path (issue 45, item 2): end-to-end latency of 1 KB records at a fixed
rate, produce -> consume, direct to the broker, through ``tierkeeper gateway`` and through a naive byte
pipe (no parsing: the floor any proxy pays), in the same run, rounds interleaved.

    PYTHONPATH=.:tests:bench .venv/bin/python bench/gateway_latency_bench.py [--rate 200] [--seconds 10]
        [--rounds 6] [--profile DIR] [--json results.json]

One Kafka 4.1 broker (tests/harness) with a second plaintext listener advertised at the pipe's port
(harness.kafka's ``extra_listeners``), so a client bootstrapped through the pipe stays behind it, as a
gateway's clients stay behind the gateway (which rewrites the addresses itself). Per path one topic of one
partition, one librdkafka producer (linger.ms 0, acks=all) and one consumer assigned at the partition's
end (fetch.wait.max.ms 500, fetch.min.bytes 1: the broker answers the waiting fetch as a record lands).
Each round sends ``--rate`` records a second for ``--seconds`` on one path, each stamped with the
monotonic clock just before ``produce()``; its latency is the consumer's ``poll()`` returning it. A
round per path, the order rotating, ``--rounds`` times (the machine's load moves by the minute; rounds
seconds apart compare fairly); a 1 s warm-up per path first. Reported: p50 and p99 per path over every
sample, the added p50/p99 of the gateway and the pipe over direct, and their ratio (goal: the gateway's
added p50 and p99 within 1.5x of the pipe's); the same added figures per rotation of the three paths and
their medians (``paired_rounds``); and each proxy's CPU per record in its own rounds (both run in
processes of their own). ``--profile DIR`` runs the gateway under cProfile
(DIR/latency.prof).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from gateway_bench import GatewayRun, create_topic, log, machine_notes, pct

from harness.balancer import pipe
from harness.kafka import KafkaCluster
from harness.ports import free_ports

PATHS = ("direct", "gateway", "pipe")
RECORD_BYTES = 1024
STAMP = struct.Struct(">qq")
"""(round, monotonic ns at produce) at the head of each record's value."""
GOAL = 1.5


class Clients:
    """One path's producer and consumer, alive across rounds."""

    def __init__(self, name: str, bootstrap: str, topic: str) -> None:
        self.name, self.topic = name, topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "enable.idempotence": True}
        )
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"latency-{name}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 500,
                "fetch.min.bytes": 1,
            }
        )
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_END)])

    def close(self) -> None:
        self.producer.flush(30)
        self.consumer.close()


def one_round(path: Clients, round_id: int, rate: float, seconds: float) -> list[float]:
    """Latencies (ms) of ``rate`` x ``seconds`` records sent on ``path``, every one received."""
    count = int(rate * seconds)
    got: list[float] = []
    done = threading.Event()

    def consume() -> None:
        deadline = time.monotonic() + seconds + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = path.consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            now = time.monotonic_ns()
            value = msg.value()
            assert value is not None
            sent_round, sent = STAMP.unpack_from(value)
            if sent_round == round_id:
                got.append((now - sent) / 1e6)
        done.set()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    pad = b"x" * (RECORD_BYTES - STAMP.size)
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        path.producer.produce(path.topic, value=STAMP.pack(round_id, time.monotonic_ns()) + pad)
        path.producer.poll(0)
    path.producer.flush(30)
    done.wait(seconds + 90)
    if len(got) < count:
        raise RuntimeError(f"{path.name}: {len(got)} of {count} records came back")
    return got


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc/PID/stat)."""
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def summary(samples: dict[str, list[float]], cpu: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, values in samples.items():
        out[name] = {"p50_ms": pct(values, 0.50), "p99_ms": pct(values, 0.99), "samples": len(values)}
        if name in cpu:  # the proxy's CPU per record during its own rounds (a produce and a fetch answer)
            out[name]["cpu_us_per_record"] = cpu[name] / len(values) * 1e6
    for name in ("gateway", "pipe"):
        for q in ("p50", "p99"):
            out[name][f"added_{q}_ms"] = out[name][f"{q}_ms"] - out["direct"][f"{q}_ms"]
    for q in ("p50", "p99"):
        pipe_added = out["pipe"][f"added_{q}_ms"]
        out[f"ratio_{q}"] = out["gateway"][f"added_{q}_ms"] / pipe_added if pipe_added > 0 else float("nan")
    out["goal_met"] = all(out[f"ratio_{q}"] <= GOAL for q in ("p50", "p99"))
    return out


def paired(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per rotation (one round of each path, seconds apart), each proxy's p50 and p99 minus direct's;
    their medians over the rotations: on a machine whose load moves by the minute, closer to what each
    proxy adds than the pooled figures."""
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rounds:
        by_round.setdefault(r["round"], {})[r["path"]] = r
    out: dict[str, Any] = {}
    for name in ("gateway", "pipe"):
        for q in ("p50", "p99"):
            added = [v[name][f"{q}_ms"] - v["direct"][f"{q}_ms"] for v in by_round.values()]
            out[f"{name}_added_{q}_ms"] = {"median": statistics.median(added), "rounds": added}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=200.0, help="records per second (default 200)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of one round (default 10)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per path (default 6)")
    parser.add_argument("--profile", type=Path, help="run the gateway under cProfile, write DIR/latency.prof")
    parser.add_argument("--json", type=Path, help="write the results here too")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gw-latency-") as tmp:
        work = Path(tmp)
        pipe_port, pipe_listener = free_ports(2)
        cluster = KafkaCluster(
            work / "kafka", brokers=1, extra_listeners={"PIPE": {1: (pipe_listener, pipe_port)}}
        ).start()
        paths: list[Clients] = []
        gateway: GatewayRun | None = None
        try:
            (work / "tier").mkdir()
            if ns.profile:
                ns.profile.mkdir(parents=True, exist_ok=True)
            gateway = GatewayRun(
                cluster.bootstrap_servers,
                ["--remote", f"file://{work / 'tier'}"],
                work / "gateway",
                {},
                ns.profile / "latency.prof" if ns.profile else None,
            ).start()
            with pipe(pipe_port, "127.0.0.1", pipe_listener) as pipe_proc:
                proxies = {"gateway": gateway.pid, "pipe": pipe_proc.pid}
                bootstraps = {
                    "direct": cluster.bootstrap_servers,
                    "gateway": gateway.bootstrap,
                    "pipe": f"127.0.0.1:{pipe_port}",
                }
                for name in PATHS:
                    create_topic(cluster.bootstrap_servers, f"latency-{name}", 1, 1)
                paths = [Clients(name, bootstraps[name], f"latency-{name}") for name in PATHS]
                for i, path in enumerate(paths):  # warm-up: connections, metadata, the JIT of the broker
                    one_round(path, -1 - i, ns.rate, 1.0)
                samples: dict[str, list[float]] = {name: [] for name in PATHS}
                cpu: dict[str, float] = dict.fromkeys(proxies, 0.0)
                rounds: list[dict[str, Any]] = []
                for r in range(ns.rounds):
                    for path in paths[r % 3 :] + paths[: r % 3]:
                        before = {name: cpu_seconds(pid) for name, pid in proxies.items()}
                        got = one_round(path, r, ns.rate, ns.seconds)
                        if path.name in proxies:
                            cpu[path.name] += cpu_seconds(proxies[path.name]) - before[path.name]
                        samples[path.name] += got
                        rounds.append(
                            {"round": r, "path": path.name, "p50_ms": pct(got, 0.5), "p99_ms": pct(got, 0.99)}
                        )
                        log(f"round {r} {path.name}: p50 {pct(got, 0.5):.3f} ms, p99 {pct(got, 0.99):.3f} ms")
                for path in paths:
                    path.close()
        finally:
            if gateway is not None:
                gateway.stop()
            cluster.stop()
    result = {
        "machine": machine_notes(),
        "settings": {
            "rate": ns.rate,
            "seconds": ns.seconds,
            "rounds": ns.rounds,
            "record_bytes": RECORD_BYTES,
        },
        "summary": summary(samples, cpu),
        "rounds": rounds,
        "paired_rounds": paired(rounds),
        "median_of_rounds": {
            name: {
                q: statistics.median(r[f"{q}_ms"] for r in rounds if r["path"] == name)
                for q in ("p50", "p99")
            }
            for name in PATHS
        },
    }
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if ns.json:
        ns.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
