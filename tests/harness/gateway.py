"""``tierkeeper gateway`` as a child process, as a user runs it, and the tier-and-trim steps before it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.kafka import KafkaCluster
from harness.kafka_dist import HarnessError
from harness.ports import wait_port
from harness.tierkeeper_cli import run_cli


def free_port_block(count: int) -> int:
    """A base port with ``count`` free ports above it (the gateway's broker ports: base + node id), below
    the kernel's ephemeral range: a gateway restarted on its ports (as the tests do after a kill) must not
    find one of them taken by some client's outgoing connection meanwhile."""
    import random

    low = 10000
    try:
        high = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]) - count - 1
    except (OSError, ValueError, IndexError):
        high = 32000
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(low, max(high, low + 1))
        if _all_free(range(base, base + count + 1)):
            return base
    raise HarnessError(f"no block of {count} free ports found below the ephemeral range")


def _all_free(ports: range) -> bool:
    import socket

    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


@dataclass
class GatewayProcess:
    """A running gateway: bootstrap at ``bootstrap``, broker N at ``host:base+N``. Replicas behind a
    balancer (harness.balancer) share ``port`` and ``metrics_port``, each on a loopback address of its own
    (``host``), and advertise the balancer's (``--advertised-host`` in ``extra``)."""

    bootstrap_servers: str
    remote: str
    workdir: Path
    extra: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[str] | None = None
    port: int = 0
    metrics_port: int = 0
    banner: str = ""
    host: str = "127.0.0.1"

    def start(self, timeout: float = 60.0) -> GatewayProcess:
        if not self.port:
            # bootstrap, brokers 1..7 (base + node id), metrics: all below the ephemeral range
            self.port = free_port_block(9)
            self.metrics_port = self.port + 9
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "storage_core.cli",
                "gateway",
                "--bootstrap-servers",
                self.bootstrap_servers,
                "--remote",
                self.remote,
                "--listen",
                f"{self.host}:{self.port}",
                "--metrics-listen",
                f"{self.host}:{self.metrics_port}",
                *self.extra,
            ],
            stdout=subprocess.PIPE,
            stderr=open(self.log_file, "a"),
            text=True,
            env={**os.environ, **self.env},
        )
        assert self.proc.stdout is not None
        self.banner = self.proc.stdout.readline().strip()
        if not self.banner.startswith("tierkeeper gateway: bootstrap") or not wait_port(
            self.port, timeout, self.host
        ):
            self.kill()
            raise HarnessError(f"the gateway did not start: {self.banner!r}\n{self.log()[-3000:]}")
        return self

    @property
    def log_file(self) -> Path:
        return self.workdir / "gateway.log"

    def log(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://{self.host}:{self.metrics_port}/metrics", timeout=10) as r:
            return str(r.read().decode())

    def metric(self, name: str) -> float:
        """The sum of a metric's samples (every label set)."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(name) and (line[len(name)] in " {"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def tier_and_trim(
    cluster: KafkaCluster,
    remote_flags: list[str],
    topic: str | list[str],
    env: dict[str, str] | None = None,
) -> None:
    """Tier every broker's copy of ``topic`` (one or several, in one pass of the commands) and trim the
    brokers behind the tier (Tierkeeper's own commands): afterwards the brokers' log start is above 0 and
    the history is only in the tier."""
    bootstrap = ["--bootstrap-servers", cluster.bootstrap_servers]
    topics = [arg for name in ([topic] if isinstance(topic, str) else topic) for arg in ("--topic", name)]
    for node in cluster.node_ids:
        copied = run_cli(
            "copy",
            "--log-dir",
            str(cluster.log_dir(node)),
            *bootstrap,
            *topics,
            *remote_flags,
            env=env,
        )
        if copied.returncode != 0:
            raise HarnessError(f"copy from broker {node} failed: {copied.stderr}")
    cleaned = run_cli("cleanup", *bootstrap, *topics, "--local-retention-bytes", "0", *remote_flags, env=env)
    if cleaned.returncode != 0:
        raise HarnessError(f"cleanup failed: {cleaned.stderr}")
