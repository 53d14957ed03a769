"""The kstatus checker (tests/kstatus/): a small Go program around sigs.k8s.io/cli-utils/pkg/kstatus.

kstatus is the library Flux's health checks and kstatus-based ``wait`` tooling use to read an object's
health. The program is built once per source version with the Go toolchain (modules from the Go module
proxy, pinned by tests/kstatus/go.mod and go.sum) into ``<cache>/kstatus-<digest>/kstatus``; a file lock
makes a concurrent test run wait for the first build instead of starting its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.kafka_dist import HarnessError
from harness.paths import REPO_ROOT, cache_dir

SOURCE = REPO_ROOT / "tests" / "kstatus"
SOURCE_FILES = ("go.mod", "go.sum", "main.go")


@dataclass(frozen=True)
class KstatusResult:
    kind: str
    name: str
    status: str  # Current, InProgress, Failed, Terminating (also NotFound/Unknown from kstatus)
    message: str


def _digest() -> str:
    h = hashlib.sha256()
    for name in SOURCE_FILES:
        h.update(name.encode() + b"\0" + (SOURCE / name).read_bytes())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def kstatus_binary() -> Path:
    """Path of the built checker, building it on first use (a few minutes the first time on 2 cores)."""
    target_dir = cache_dir() / f"kstatus-{_digest()}"
    binary = target_dir / "kstatus"
    if os.access(binary, os.X_OK):
        return binary
    go = shutil.which("go")
    if go is None:
        raise HarnessError(
            "the Go toolchain (go) is not on PATH: it builds the kstatus checker in tests/kstatus"
        )
    target_dir.mkdir(parents=True, exist_ok=True)
    with _lock(target_dir / "build.lock"):
        if os.access(binary, os.X_OK):
            return binary
        partial = target_dir / "kstatus.partial"
        # GOTOOLCHAIN=local: build with the installed Go, never download another toolchain mid-test.
        env = {
            **os.environ,
            "CGO_ENABLED": "0",
            "GOWORK": "off",
            "GOFLAGS": "-mod=readonly",
            "GOTOOLCHAIN": "local",
        }
        proc = subprocess.run(
            [go, "build", "-trimpath", "-o", str(partial), "."],
            cwd=SOURCE,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if proc.returncode != 0:
            raise HarnessError(f"go build of {SOURCE} exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
        os.replace(partial, binary)  # last, so a concurrent run never executes a half-written binary
    return binary


def kstatus_of(documents: str) -> list[KstatusResult]:
    """kstatus's verdict for each object in ``documents`` (YAML or JSON, several separated by ``---``)."""
    return _run([], documents)


def kstatus_live(kubeconfig: Path, gvr: str, namespace: str, name: str) -> list[KstatusResult]:
    """kstatus's verdict for one live object; ``gvr`` is ``group/version/plural``."""
    return _run(["-kubeconfig", str(kubeconfig), "-gvr", gvr, "-namespace", namespace, name], None)


def _run(args: list[str], stdin: str | None) -> list[KstatusResult]:
    proc = subprocess.run(
        [str(kstatus_binary()), *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise HarnessError(f"kstatus checker failed: {proc.stderr.strip()}")
    return [
        KstatusResult(kind=r["kind"], name=r["name"], status=r["status"], message=r["message"])
        for r in map(json.loads, proc.stdout.splitlines())
    ]


def ensure_kstatus() -> Path:
    """Build now (``make harness``), so test runs find the binary in the cache."""
    return kstatus_binary()


if __name__ == "__main__":
    print(ensure_kstatus())
