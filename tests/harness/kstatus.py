"""The kstatus checker (tests/kstatus/): a small Go program around sigs.k8s.io/cli-utils/pkg/kstatus.

kstatus is the library Flux's health checks and kstatus-based ``wait`` tooling use to read an object's
health. The program is built once per source version with the Go toolchain (modules from the Go module
proxy, pinned by tests/kstatus/go.mod and go.sum) into ``<cache>/kstatus-<digest>/kstatus``; a file lock
makes a concurrent test run wait for the first build instead of starting its own.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.go_build import go_binary
from harness.kafka_dist import HarnessError
from harness.paths import REPO_ROOT

SOURCE = REPO_ROOT / "tests" / "kstatus"


@dataclass(frozen=True)
class KstatusResult:
    kind: str
    name: str
    status: str  # Current, InProgress, Failed, Terminating (also NotFound/Unknown from kstatus)
    message: str


def kstatus_binary() -> Path:
    """Path of the built checker, building it on first use (a few minutes the first time on 2 cores)."""
    return go_binary(SOURCE, "kstatus")


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
