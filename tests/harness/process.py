"""Child processes that die with the test run, even when the test run is killed."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # A SIGKILLed pytest must not leave brokers or moto servers holding ports and disk.
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    tied_to_parent: bool = True,
) -> subprocess.Popen[bytes]:
    log: IO[bytes] = open(log_path, "ab")
    try:
        return subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            preexec_fn=_die_with_parent if tied_to_parent else os.setsid,
        )
    finally:
        log.close()


def terminate(proc: subprocess.Popen[bytes], *, kill: bool = False, timeout: float = 60.0) -> None:
    """SIGTERM (graceful) or SIGKILL the process group, then reap it."""
    if proc.poll() is not None:
        return
    sig = signal.SIGKILL if kill else signal.SIGTERM
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
