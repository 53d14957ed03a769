"""A moto S3 server process on 127.0.0.1, the way s3fs tests itself, plus s3fs options that reach it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import process
from harness.kafka_dist import HarnessError
from harness.ports import free_ports

DUMMY_KEY = "tierkeeper-test-key"
DUMMY_SECRET = "tierkeeper-test-secret"


@dataclass
class MotoServer:
    workdir: Path
    port: int = 0
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of the server, e.g. ``INITIAL_NO_AUTH_ACTION_COUNT=0``: moto then checks every
    request's credentials (unknown keys answered 403), as a real endpoint does."""
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> MotoServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_ports(1)[0]
        moto = shutil.which("moto_server", path=str(Path(sys.executable).parent))
        argv = [moto] if moto else [sys.executable, "-m", "moto.server"]
        self.proc = process.spawn(
            [*argv, "-H", "127.0.0.1", "-p", str(self.port)],
            log_path=self.workdir / "moto.log",
            env={**os.environ, **self.env} if self.env else None,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HarnessError(
                    f"moto server exited with {self.proc.returncode}: "
                    + (self.workdir / "moto.log").read_text()[-3000:]
                )
            try:
                urllib.request.urlopen(self.endpoint_url + "/moto-api/", timeout=1).read()
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        raise HarnessError(f"moto server did not answer on {self.endpoint_url} in {timeout}s")

    def reset(self) -> None:
        """Drop every bucket (moto's own reset endpoint)."""
        req = urllib.request.Request(self.endpoint_url + "/moto-api/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).read()

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options for this server: endpoint, path-style addressing, dummy credentials."""
        return {
            "key": DUMMY_KEY,
            "secret": DUMMY_SECRET,
            "client_kwargs": {"endpoint_url": self.endpoint_url},
            "config_kwargs": {"s3": {"addressing_style": "path"}},
            "use_listings_cache": False,
        }

    def stop(self) -> None:
        if self.proc is not None:
            process.terminate(self.proc, kill=True)
            self.proc = None
