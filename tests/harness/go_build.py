"""Small Go programs under tests/ (the kstatus checker, the Prometheus rules checker), built once per
source version with the installed Go toolchain into ``<cache>/<name>-<digest>/<name>``. Modules come from
the Go module proxy, pinned by the program's go.mod and go.sum; a file lock makes a concurrent test run
wait for the first build instead of starting its own."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from harness.kafka_dist import HarnessError
from harness.paths import cache_dir

SOURCE_FILES = ("go.mod", "go.sum", "main.go")


def _digest(source: Path) -> str:
    h = hashlib.sha256()
    for name in SOURCE_FILES:
        h.update(name.encode() + b"\0" + (source / name).read_bytes())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def go_binary(source: Path, name: str) -> Path:
    """Path of the program built from ``source``, building it on first use (minutes on 2 cores)."""
    target_dir = cache_dir() / f"{name}-{_digest(source)}"
    binary = target_dir / name
    if os.access(binary, os.X_OK):
        return binary
    go = shutil.which("go")
    if go is None:
        raise HarnessError(f"the Go toolchain (go) is not on PATH: it builds the {name} program in {source}")
    target_dir.mkdir(parents=True, exist_ok=True)
    with _lock(target_dir / "build.lock"):
        if os.access(binary, os.X_OK):
            return binary
        partial = target_dir / f"{name}.partial"
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
            cwd=source,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if proc.returncode != 0:
            raise HarnessError(f"go build of {source} exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
        os.replace(partial, binary)  # last, so a concurrent run never executes a half-written binary
    return binary
