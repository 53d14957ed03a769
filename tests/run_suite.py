"""Run the whole suite as two pytest processes side by side (`make test`), and fail if either fails.

Most of the suite's wall time is spent waiting (a JVM starting, a Job's pod, a poll's deadline), so one
pytest process leaves a 2-core machine half idle. The split is by the expensive things a test starts:
the Kubernetes control plane and the campaign live in one group, Spark and the gateway's shared cluster
in the other, so no session fixture of that weight starts twice. Every test runs in exactly one group:
the control-plane group names its folders, the data group runs the rest.

The data group streams its output as it runs; the control-plane group writes to a log file (its path is
printed first) that is printed once it ends. Extra arguments are passed to both pytest runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent

CONTROL_PLANE_GROUP = (
    "tests/k8s",
    "tests/campaign",
    "tests/packaging",
    "tests/gitops",
    "tests/e2e",
    "tests/rebuild",
    "tests/gateway/test_gateway_container.py",
    "tests/reliability",
    "tests/fetchers",
    "tests/crash",
    "tests/overlap",
    "tests/formats",
    "tests/recovery",
    "tests/retention",
)
"""What runs beside the data group: everything on the control plane, and enough Kafka-only suites to
balance the two groups' times (measured on clean clones)."""


@dataclass
class Group:
    name: str
    args: list[str]
    log: Path | None
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    ended: float = 0.0


def _groups(extra: list[str], log_dir: Path) -> list[Group]:
    # -p no:cacheprovider: two runs writing .pytest_cache at once would race, and nothing reads it here.
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *extra]
    ignored = [f"--ignore={path}" for path in CONTROL_PLANE_GROUP]
    return [
        Group("data", [*base, "tests", *ignored], None),
        Group("control-plane", [*base, *CONTROL_PLANE_GROUP], log_dir / "control-plane.log"),
    ]


def _start(group: Group) -> None:
    out = group.log.open("wb") if group.log is not None else None
    group.started = time.monotonic()
    # A session of its own: a terminal's Ctrl-C reaches only this runner, which forwards it once. In the
    # terminal's process group each pytest would get it twice (from the terminal and forwarded), and a
    # second SIGINT stops pytest's teardown, leaving its brokers and control plane running.
    group.process = subprocess.Popen(
        group.args,
        cwd=ROOT,
        stdout=out,
        stderr=subprocess.STDOUT if out else None,
        start_new_session=True,
    )
    if out is not None:
        out.close()


def main(argv: list[str]) -> int:
    log_dir = Path(tempfile.mkdtemp(prefix="tierkeeper-suite-"))
    groups = _groups(argv, log_dir)

    def forward(signum: int, _frame: FrameType | None) -> None:
        for group in groups:
            if group.process is not None and group.process.poll() is None:
                group.process.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for group in groups:
        if group.log is not None:
            print(f"[suite] group {group.name}: output in {group.log}, printed when it ends", flush=True)
        _start(group)
    pending = list(groups)
    while pending:
        for group in list(pending):
            assert group.process is not None
            if group.process.poll() is not None:
                group.ended = time.monotonic()
                pending.remove(group)
                print(f"[suite] group {group.name} ended: exit {group.process.returncode}", flush=True)
        time.sleep(1)
    for group in groups:
        if group.log is not None:
            print(f"\n[suite] ===== output of group {group.name} =====", flush=True)
            sys.stdout.buffer.write(group.log.read_bytes())
            sys.stdout.flush()
    codes = []
    for group in groups:
        assert group.process is not None
        code = group.process.returncode
        codes.append(code)
        verdict = "passed" if code == 0 else f"FAILED (exit {code})"
        print(f"[suite] {group.name}: {verdict} in {group.ended - group.started:.0f} s", flush=True)
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(sys.argv[1:]))
