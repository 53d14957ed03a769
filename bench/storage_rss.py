"""Peak memory of tiering and of reading a partition, each in a fresh child process.

The parent starts ``python bench/storage_rss.py copy|read ...``; at the end the child reports its own
``VmHWM`` (peak resident set of its address space, threads and native buffers included) with what it did,
so the parent can check the work was done. ``ru_maxrss`` from ``wait4``/``RUSAGE_CHILDREN`` would be wrong
here: it keeps the resident set the forked child shared with this (larger) parent before ``exec``. The
parent also samples the child's RSS every 20 ms with psutil as a cross-check.

    python bench/storage_rss.py copy --log-dir D --topic T --lso N --remote URL [--options JSON]
    python bench/storage_rss.py read --remote URL --topic T [--options JSON]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil


@dataclass(frozen=True)
class ChildRun:
    peak_rss_bytes: int
    """The child's own VmHWM."""
    sampled_rss_bytes: int
    """Largest RSS seen by sampling every 20 ms (a lower bound, for cross-checking)."""
    seconds: float
    report: dict[str, Any]


def run_child(args: list[str], env: dict[str, str]) -> ChildRun:
    """Run this module as a child with ``args``; return its peak RSS, wall time and JSON report."""
    out_path = Path(env.get("TK_BENCH_TMP", "/tmp")) / f"rss-child-{os.getpid()}-{time.monotonic_ns()}.json"
    argv = [sys.executable, str(Path(__file__).resolve()), *args, "--report", str(out_path)]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
    sampled = 0
    watched = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            sampled = max(sampled, watched.memory_info().rss)
        except psutil.Error:
            pass
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    try:
        if proc.returncode != 0:
            raise RuntimeError(f"benchmark child {args[0]} exited with {proc.returncode}")
        report = json.loads(out_path.read_text())
    finally:
        out_path.unlink(missing_ok=True)
    return ChildRun(int(report.pop("vm_hwm_bytes")), sampled, seconds, report)


def _peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _copy(ns: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    from storage_core.adapters.store import RemoteStore
    from storage_core.tiering.partition_copy import copy_partition
    from storage_core.tiering.plan import CopyTask

    task = CopyTask(
        log_dir=ns.log_dir,
        topic=ns.topic,
        partition=0,
        remote_url=ns.remote,
        storage_options=options,
        last_stable_offset=ns.lso,
        high_watermark=None,
    )
    result = copy_partition(task, RemoteStore(ns.remote, options))
    if result.error is not None:
        raise SystemExit(f"copy failed: {result.error}")
    return {"segments": result.copied_segments, "bytes": result.copied_bytes}


def _read(ns: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    from storage_core.adapters.store import RemoteStore
    from storage_core.remote.reader import RemoteReader

    with RemoteReader(RemoteStore(ns.remote, options)) as reader:
        tp = reader.resolve(ns.topic, 0)
        manifest = reader.manifest(tp)
        assert manifest.start_offset is not None
        count = 0
        value_bytes = 0
        for record in reader.read_from_offset(tp, manifest.start_offset):
            count += 1
            value_bytes += len(record.value or b"")
    return {"records": count, "value_bytes": value_bytes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("copy", "read"))
    parser.add_argument("--remote", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--options", default="{}", help="fsspec storage options as JSON")
    parser.add_argument("--log-dir")
    parser.add_argument("--lso", type=int)
    parser.add_argument("--report", required=True)
    ns = parser.parse_args()
    options = json.loads(ns.options)
    report = _copy(ns, options) if ns.mode == "copy" else _read(ns, options)
    report["vm_hwm_bytes"] = _peak_rss_bytes()
    Path(ns.report).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
