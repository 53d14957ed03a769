"""Keep CPU cores busy until killed: the load under which `make stress-test` runs the suite.

Usage: python tests/stress/burn.py [N]  (N spinning processes, default: the machine's core count).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys


def _spin(parent: int) -> None:
    x = 0
    # Die with the parent however it ends (even SIGKILL): Linux's parent-death signal via prctl.
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        return
    while True:  # pure Python arithmetic: one core at 100 % per process, no memory growth
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else (os.cpu_count() or 2)
    workers = [multiprocessing.Process(target=_spin, args=(os.getpid(),), daemon=True) for _ in range(n)]
    for w in workers:
        w.start()
    print(f"burning {n} cores (pids {[w.pid for w in workers]})", flush=True)
    for w in workers:
        w.join()


if __name__ == "__main__":
    main()
