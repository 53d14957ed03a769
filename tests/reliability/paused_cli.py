"""Tierkeeper's command line stopped at a fault point, for tests that act while it waits there."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def start_paused(
    args: list[str], point: str, timeout_s: int, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start ``python -m storage_core.cli`` with ``args``; return once it has stopped itself at ``point``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "storage_core.cli", *args],
        env={**os.environ, **(env or {}), "TIERKEEPER_FAULT": f"{point}:1:stop"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout_s
    while process_state(proc.pid) != "T":
        assert proc.poll() is None, f"exited before reaching {point}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"never reached {point} in {timeout_s} s"
        time.sleep(0.05)
    return proc


def process_state(pid: int) -> str:
    """The state letter /proc gives a process (``T`` when stopped), or ``gone`` once it has exited."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "gone"
    return stat.rsplit(")", 1)[1].split()[0]
