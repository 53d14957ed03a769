"""Per-thread CPU of the benchmark's processes, sampled from /proc, for finding who burns a stalled second.

Linux names a JVM thread after its Java name (cut to 15 characters: ``data-plane-kafk``,
``ReplicaFetcherT``, ``C2 CompilerThre``...), so grouping threads by that name says which of a broker's
thread pools was busy. Samples are (wall-clock time, process label -> thread group -> cores used since the
previous sample); groups under 0.02 cores are left out.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
_DIGITS = re.compile(r"[-_#]?\d+$")

Sample = tuple[float, dict[str, dict[str, float]]]


def _threads(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (thread group, CPU seconds so far) for every thread of ``pid``; empty if it is gone."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(tid)] = (_DIGITS.sub("", name), (int(fields[11]) + int(fields[12])) / _TICK)
    return out


@dataclass
class ThreadCpuSampler:
    """Samples every ``interval`` seconds the threads of the processes ``pids()`` names (label -> pid)."""

    pids: Callable[[], dict[str, int]]
    interval: float = 0.5
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="thread-cpu").start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        last: dict[tuple[int, int], float] = {}
        last_t = time.monotonic()
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            span = now - last_t
            sample: dict[str, dict[str, float]] = {}
            seen: dict[tuple[int, int], float] = {}
            for label, pid in self.pids().items():
                groups: dict[str, float] = {}
                for tid, (group, cpu) in _threads(pid).items():
                    seen[(pid, tid)] = cpu
                    used = cpu - last.get((pid, tid), cpu)
                    groups[group] = groups.get(group, 0.0) + used / span
                kept = {g: round(c, 3) for g, c in groups.items() if c >= 0.02}
                if kept:
                    sample[label] = kept
            self.samples.append((time.time(), sample))
            last, last_t = seen, now
