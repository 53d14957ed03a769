"""Line up a rebuild benchmark's probe latencies with the brokers' logs and ``vmstat``, second by second.

    vmstat -t -w 1 > vmstat.log &
    PYTHONPATH=.:tests .venv/bin/python bench/rebuild_bench.py --gib 16 --tiered-rounds 2 \\
        --trace trace.json --workdir /some/dir
    .venv/bin/python bench/rebuild_trace.py trace.json --logs /some/dir/kafka --vmstat vmstat.log

For each tiered round it prints, per second from just before the rebuild command to just after full ISR:
the probe records sent, their p99 and max latency, the vmstat line, and the broker log lines that mark
replica state changes (ISR, fencing, leadership, fetchers, recovery). This is how the one-second stall at
the rebuilt broker's rejoin was found (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import UTC, datetime
from pathlib import Path

_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] ")
_NOTABLE = (
    "ISR",
    "fence",
    "Fence",
    "unfence",
    "leader",
    "Leader",
    "fetcher",
    "Recover",
    "Truncat",
    "Elect",
    "Vote",
    "registration",
)
_NOISE = ("Skipped the become",)


def _utc(text: str, fmt: str) -> float:
    return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()


def broker_events(logs: Path) -> dict[int, list[tuple[float, str]]]:
    """Node id -> (wall-clock time, message) of the notable lines of its server.log."""
    events: dict[int, list[tuple[float, str]]] = {}
    for log in sorted(logs.glob("node-*/server.log")):
        node = int(log.parent.name.split("-")[1])
        found = []
        for line in log.read_text(errors="replace").splitlines():
            m = _STAMP.match(line)
            message = line[m.end() :] if m else ""
            if m and any(k in message for k in _NOTABLE) and not any(k in message for k in _NOISE):
                found.append((_utc(m.group(1), "%Y-%m-%d %H:%M:%S") + int(m.group(2)) / 1000, message))
        events[node] = found
    return events


def vmstat_lines(path: Path) -> tuple[str, dict[int, str]]:
    """The column header and second -> line of a ``vmstat -t -w 1`` log."""
    header, lines = "", {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if "swpd" in parts:
            header = " ".join(parts[:-1])
        elif len(parts) > 5 and parts[0].isdigit():
            lines[int(_utc(f"{parts[-2]} {parts[-1]}", "%Y-%m-%d %H:%M:%S"))] = " ".join(parts[:-2])
    return header, lines


def _busiest(samples: list[tuple[float, dict[str, dict[str, float]]]], second: int, top: int = 4) -> str:
    """The busiest thread groups per process in ``second`` (mean cores over the samples inside it)."""
    inside = [groups for t, groups in samples if second <= t < second + 1]
    if not inside:
        return ""
    summed: dict[tuple[str, str], float] = {}
    for sample in inside:
        for label, groups in sample.items():
            for group, cores in groups.items():
                summed[(label, group)] = summed.get((label, group), 0.0) + cores / len(inside)
    parts = []
    for label in sorted({label for label, _ in summed}):
        mine = sorted(((c, g) for (lab, g), c in summed.items() if lab == label), reverse=True)[:top]
        parts.append(
            f"{label} {sum(c for (lab, _), c in summed.items() if lab == label):.2f} ("
            + ", ".join(f"{g} {c:.2f}" for c, g in mine)
            + ")"
        )
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path, help="the JSON written by rebuild_bench.py --trace")
    parser.add_argument("--logs", type=Path, help="the cluster dir (node-N/server.log below it)")
    parser.add_argument("--vmstat", type=Path, help="a `vmstat -t -w 1` log of the same run")
    args = parser.parse_args()
    trace = json.loads(args.trace.read_text())
    samples: list[tuple[float, float]] = trace["samples"]
    events = broker_events(args.logs) if args.logs else {}
    header, vm = vmstat_lines(args.vmstat) if args.vmstat else ("", {})
    if header:
        print(f"vmstat: {header}")
    for n, r in enumerate(trace["rounds"], 1):
        start = r["start"]
        print(
            f"\n=== round {n}: restore command +0.0, broker started +{r['rebuilt'] - start:.1f}, registered "
            f"+{r['started'] - start:.1f}, full ISR +{r['end'] - start:.1f}"
        )
        for second in range(int(start) - 2, int(r["end"]) + 4):
            lat = sorted(ms * 1000 for t, ms in samples if second <= t < second + 1)
            p99 = lat[int(0.99 * (len(lat) - 1))] if lat else 0.0
            print(
                f"+{second - start:6.1f}  n={len(lat):3d}  p99={p99:7.1f}  "
                f"max={lat[-1] if lat else 0:7.1f} ms"
                f"  | {vm.get(second, '-')}"
            )
            busy = _busiest(trace.get("threads", []), second)
            if busy:
                print(f"        cpu: {busy}")
            for node, found in sorted(events.items()):
                for t, message in found:
                    if second <= t < second + 1:
                        print(f"        broker {node}: {message[:160]}")


if __name__ == "__main__":
    main()
