"""Storage core benchmarks (issue 3): copy throughput, sequential remote read, peak RSS.

    PYTHONPATH=.:tests .venv/bin/python bench/storage_bench.py [--size-mib 1024] [--segment-mib 128]
        [--copy-rounds 3] [--file-copy-rounds 8] [--copy-per-segment] [--read-rounds 2] [--targets file,s3]
        [--block-mib 4] [--depth 3] [--json results.json]

Produces about 1 GiB into one partition of a real Kafka 4.1 broker (tests/harness), stops the broker,
then for each target (file:// in the temp dir, s3:// on a moto server):

1. copy: ``fs.put_file`` of every tiered segment's .log/.index/.timeindex vs one ``copy_partition`` pass
   (CRC checks, markers, remote indexes, manifest included), each round to fresh prefixes, order
   alternating, sources read into the page cache first; ratio = raw seconds / ours, median over rounds.
   ``--copy-per-segment`` instead times one pass per rolled segment against that segment's raw put.
2. read, per tiered segment object: sequential ``cat_file`` ranges vs
   (a) ``RemoteReader.read_batches_from_offset`` (CRC-checked batches, records not decoded) and
   (b) ``RemoteReader.read_from_offset`` decoding every record, back to back with the order rotating;
   ratio = raw seconds / ours, median over all segment reads.
3. peak RSS of a child process that tiers the partition, and of one that reads it back record by record.
Everything lives in one temp dir that is removed at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import storage_data
import storage_measure as m
from storage_rss import run_child

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore
from storage_core.formats.crc import is_hardware_accelerated
from storage_core.remote.reader import ReadOptions, RemoteReader

MiB = 1 << 20
TOPIC = "storage-bench"
RSS_LIMIT = 300 * 1000 * 1000
COPY_GOAL = READ_GOAL = 0.9
REPO = Path(__file__).resolve().parent.parent


@dataclass
class Row:
    target: str
    benchmark: str
    baseline_mib_s: float | None
    ours_mib_s: float | None
    ratio: float | None
    ratios: list[float]
    goal: str
    met: bool | None  # None: informational, no goal
    notes: str = ""


@dataclass
class Results:
    machine: dict[str, Any]
    data: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine_notes() -> dict[str, Any]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "crc32c_hardware": is_hardware_accelerated(),
        "loadavg_start": os.getloadavg(),
        "cpu_pressure_start": m.cpu_pressure(),
    }


# ---- data ----------------------------------------------------------------------------------------
def prepare(workdir: Path, ns: argparse.Namespace) -> tuple[Path, int, dict[str, Any]]:
    """Produce the partition on a real broker; return its log dir, last stable offset and a summary."""
    cluster = KafkaCluster(workdir / "kafka", brokers=1, quick_start=False)
    log("starting a Kafka broker")
    try:
        cluster.start()
        storage_data.create_topic(cluster.bootstrap_servers, TOPIC, ns.segment_mib * MiB)
        log(f"producing {ns.size_mib} MiB of {ns.value_bytes}-byte values")
        produced = storage_data.produce(
            cluster.bootstrap_servers,
            TOPIC,
            ns.size_mib * MiB,
            value_bytes=ns.value_bytes,
            batch_bytes=ns.batch_bytes,
        )
        lso = KafkaAdmin(cluster.bootstrap_servers).last_stable_offsets([(TOPIC, 0)])[(TOPIC, 0)]
    finally:
        # The copy reads rolled segments only, which a broker never changes; stopping it keeps its JVM
        # off the two cores while we measure.
        cluster.stop(graceful=True)
    log_dir = cluster.log_dir(1)
    segments = m.tiered_segments(log_dir / f"{TOPIC}-0")
    summary: dict[str, Any] = {
        "records": produced.records,
        "value_bytes": produced.value_bytes,
        "produce_seconds": round(produced.seconds, 1),
        "last_stable_offset": lso,
        "segment_bytes": ns.segment_mib * MiB,
        "tiered_segments": len(segments),
        "tiered_log_bytes": sum(seg.log.stat().st_size for seg in segments),
        "tiered_file_bytes": sum(seg.size for seg in segments),
        "producer": f"librdkafka batch.size={ns.batch_bytes}, linger.ms=20, no compression",
    }
    return log_dir, lso, summary


# ---- copy ----------------------------------------------------------------------------------------
def bench_copy(
    target: str,
    url: str,
    options: dict[str, Any],
    log_dir: Path,
    lso: int,
    rounds: int,
    per_segment: bool,
    moto: MotoServer | None,
    res: Results,
) -> str:
    """Each round copies the partition with every method to fresh prefixes, order rotating.

    Default: one ``copy_partition`` pass over the whole partition against ``put_file`` of every segment's
    files. ``per_segment``: per segment, a pass whose last stable offset has just moved past it (so it
    copies that one, as a loop tiering each rolled segment does) against the raw put of that segment, back
    to back, so each ratio compares runs seconds apart. Returns the URL of the last round's Tierkeeper
    copy (kept for the read benchmark)."""
    store = RemoteStore(url, options)
    segments = m.tiered_segments(log_dir / f"{TOPIC}-0")
    payload = sum(seg.size for seg in segments)
    # On file:// durability is a choice on both sides: put_file leaves its data in the page cache, our copy
    # fsyncs data and markers unless told not to (--no-fsync). Each side is timed both ways, and the goal
    # is judged like for like; the mixed pair (durable copy vs page-cache put) is shown for reference.
    names: tuple[str, ...] = (
        ("raw", "raw+fsync", "tierkeeper", "tierkeeper-nofsync") if store.is_local else ("raw", "tierkeeper")
    )
    comparisons = (
        [("copy (CRC-checked) vs fs.put_file", "raw", "tierkeeper", True)]
        if not store.is_local
        else [
            ("copy (CRC-checked, fsync) vs fs.put_file + fsync", "raw+fsync", "tierkeeper", True),
            ("copy (CRC-checked, --no-fsync) vs fs.put_file", "raw", "tierkeeper-nofsync", True),
            ("copy (CRC-checked, fsync) vs fs.put_file (informational)", "raw", "tierkeeper", False),
        ]
    )
    seconds: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, float] = dict.fromkeys(names, 0.0)
    server_cpu: dict[str, float] = dict.fromkeys(names, 0.0)
    pairs: dict[str, list[float]] = {label: [] for label, *_ in comparisons}
    kept = ""
    turn = 0
    dropped = False
    # Steps of a round: (files to warm, segments the raw put ships, last stable offset of our pass).
    steps = (
        [(seg.files(), [seg], seg.next_offset) for seg in segments]
        if per_segment
        else [([p for seg in segments for p in seg.files()], segments, lso)]
    )
    for r in range(rounds):
        ours = {
            "tierkeeper": RemoteStore(f"{url}/copy-{r}-tierkeeper", options),
            "tierkeeper-nofsync": RemoteStore(f"{url}/copy-{r}-tierkeeper-nofsync", options, fsync=False),
        }
        spent = dict.fromkeys(names, 0.0)
        for files, raw_segments, step_lso in steps:
            taken: dict[str, float] = {}
            for name in m.balanced_order(names, turn):
                dropped = m.settle()
                m.warm(files)
                before = m.pid_cpu_seconds(moto.proc.pid) if moto and moto.proc else 0.0
                if name.startswith("raw"):
                    sent, t = m.timed(
                        partial(m.raw_put, store, raw_segments, f"copy-{r}-{name}", fsync=name == "raw+fsync")
                    )
                    assert sent == sum(seg.size for seg in raw_segments)
                else:
                    result, t = m.timed(partial(m.tierkeeper_copy, ours[name], log_dir, TOPIC, step_lso))
                    assert result.copied_bases == [seg.base_offset for seg in raw_segments], result
                if moto and moto.proc:
                    server_cpu[name] += m.pid_cpu_seconds(moto.proc.pid) - before
                taken[name] = t.seconds
                spent[name] += t.seconds
                cpu[name] += t.cpu_seconds
            turn += 1
            for label, base, mine, _goal in comparisons:
                pairs[label].append(taken[base] / taken[mine])
        for name in names:
            seconds[name].append(spent[name])
        log(
            f"{target} copy round {r}: "
            + ", ".join(f"{k} {payload / v / MiB:.0f} MiB/s" for k, v in spent.items())
            + f" (pressure {m.cpu_pressure()})"
        )
        for name in names:
            if name != "tierkeeper":
                m.remove_prefix(store, f"copy-{r}-{name}")
        if kept:
            m.remove_prefix(store, kept)
        kept = f"copy-{r}-tierkeeper"
    for label, base, mine, goal in comparisons:
        ratio = m.median(pairs[label])
        if per_segment:
            label = label.replace("copy", "copy per segment", 1)
        res.rows.append(
            Row(
                target,
                label,
                payload / m.median(seconds[base]) / MiB,
                payload / m.median(seconds[mine]) / MiB,
                ratio,
                [a / b for a, b in zip(seconds[base], seconds[mine])],
                f">= {COPY_GOAL}x" if goal else "-",
                ratio >= COPY_GOAL if goal else None,
            )
        )
    res.detail[f"{target}/copy"] = {
        "payload_bytes": payload,
        "segments": len(segments),
        "per_segment": per_segment,
        "page_cache_dropped_between_methods": dropped,
        "round_seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
        "cpu_seconds_total": {k: round(v, 2) for k, v in cpu.items()},
        "server_cpu_seconds_total": {k: round(v, 2) for k, v in server_cpu.items()} if moto else {},
        "pair_ratios": {label: [round(x, 3) for x in v] for label, v in pairs.items()},
    }
    return f"{url}/{kept}"


# ---- read ---------------------------------------------------------------------------------------
def bench_read(
    target: str,
    url: str,
    options: dict[str, Any],
    read_options: ReadOptions,
    rounds: int,
    moto: MotoServer | None,
    res: Results,
) -> None:
    """Each segment object is read by the three methods back to back (order rotating), so every ratio
    compares runs a few seconds apart: load from other processes shifts over minutes, not seconds."""
    store = RemoteStore(url, options)
    names = ["raw", "batches", "records"]
    seconds: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, float] = dict.fromkeys(names, 0.0)
    server_cpu: dict[str, float] = dict.fromkeys(names, 0.0)
    pairs: dict[str, list[float]] = {"batches": [], "records": []}
    with RemoteReader(store, read_options) as reader:
        tp = reader.resolve(TOPIC, 0)
        logs = m.tiered_logs(reader, tp)
        size = sum(log_.size for log_ in logs)
        records = sum(log_.end_offset - log_.base_offset + 1 for log_ in logs)
        turn = 0
        for r in range(rounds):
            spent = dict.fromkeys(names, 0.0)
            for log_ in logs:
                if store.is_local:
                    m.warm([Path(log_.key)])
                methods: dict[str, Callable[[], int]] = {
                    "raw": partial(m.raw_read, store, log_, read_options.block_bytes),
                    "batches": partial(m.stream_batches, reader, tp, log_),
                    "records": partial(m.read_records, reader, tp, log_),
                }
                taken: dict[str, float] = {}
                for name in m.balanced_order(names, turn):
                    before = m.pid_cpu_seconds(moto.proc.pid) if moto and moto.proc else 0.0
                    got, t = m.timed(methods[name])
                    if moto and moto.proc:
                        server_cpu[name] += m.pid_cpu_seconds(moto.proc.pid) - before
                    want = log_.size if name == "raw" else log_.end_offset - log_.base_offset + 1
                    assert got == want, f"{name} of {log_.key} read {got}, expected {want}"
                    taken[name] = t.seconds
                    spent[name] += t.seconds
                    cpu[name] += t.cpu_seconds
                turn += 1
                for name in pairs:
                    pairs[name].append(taken["raw"] / taken[name])
            for name in names:
                seconds[name].append(spent[name])
            log(
                f"{target} read round {r}: "
                + ", ".join(f"{k} {size / v / MiB:.0f} MiB/s" for k, v in spent.items())
                + f" (pressure {m.cpu_pressure()})"
            )
    raw_s = m.median(seconds["raw"])
    labels = {
        "batches": "read (a) batches, CRC-checked, vs raw cat_file",
        "records": "read (b) all records decoded vs raw cat_file",
    }
    for name, label in labels.items():
        round_ratios = [a / b for a, b in zip(seconds["raw"], seconds[name])]
        ratio = m.median(pairs[name])
        res.rows.append(
            Row(
                target,
                label,
                size / raw_s / MiB,
                size / m.median(seconds[name]) / MiB,
                ratio,
                round_ratios,
                f">= {READ_GOAL}x",
                ratio >= READ_GOAL,
            )
        )
    res.detail[f"{target}/read"] = {
        "bytes": size,
        "records": records,
        "segments": len(logs),
        "block_bytes": read_options.block_bytes,
        "readahead_blocks": read_options.readahead_blocks,
        "round_seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
        "cpu_seconds_total": {k: round(v, 2) for k, v in cpu.items()},
        "server_cpu_seconds_total": {k: round(v, 2) for k, v in server_cpu.items()} if moto else {},
        "segment_ratios": {k: [round(x, 3) for x in v] for k, v in pairs.items()},
    }


# ---- memory --------------------------------------------------------------------------------------
def bench_rss(
    target: str,
    url: str,
    read_url: str,
    options: dict[str, Any],
    log_dir: Path,
    lso: int,
    workdir: Path,
    res: Results,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TK_BENCH_TMP": str(workdir)}
    common = ["--topic", TOPIC, "--options", json.dumps(options)]
    copy = run_child(
        ["copy", "--remote", f"{url}/rss-copy", "--log-dir", str(log_dir), "--lso", str(lso), *common], env
    )
    log(
        f"{target} rss copy: {copy.peak_rss_bytes / 1e6:.0f} MB (sampled {copy.sampled_rss_bytes / 1e6:.0f}) "
        f"in {copy.seconds:.1f}s {copy.report}"
    )
    read = run_child(["read", "--remote", read_url, *common], env)
    log(
        f"{target} rss read: {read.peak_rss_bytes / 1e6:.0f} MB (sampled {read.sampled_rss_bytes / 1e6:.0f}) "
        f"in {read.seconds:.1f}s {read.report}"
    )
    for what, run in (
        ("peak RSS, tiering the partition", copy),
        ("peak RSS, reading it (all records)", read),
    ):
        res.rows.append(
            Row(
                target,
                what,
                None,
                None,
                None,
                [],
                "< 300 MB",
                run.peak_rss_bytes < RSS_LIMIT,
                f"{run.peak_rss_bytes / 1e6:.0f} MB ({run.seconds:.1f} s)",
            )
        )
    res.detail[f"{target}/rss"] = {"copy": asdict(copy), "read": asdict(read)}
    m.remove_prefix(RemoteStore(url, options), "rss-copy")


# ---- output --------------------------------------------------------------------------------------
def table(rows: list[Row]) -> str:
    out = [
        "| target | benchmark | baseline MiB/s | Tierkeeper MiB/s | ratio (median) "
        "| per round | goal | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = f"{r.baseline_mib_s:.0f}" if r.baseline_mib_s is not None else ""
        ours = f"{r.ours_mib_s:.0f}" if r.ours_mib_s is not None else r.notes
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else ""
        rounds = ", ".join(f"{x:.2f}" for x in r.ratios)
        out.append(
            f"| {r.target} | {r.benchmark} | {base} | {ours} | {ratio} | {rounds} | {r.goal} | "
            f"{'-' if r.met is None else 'yes' if r.met else 'NO'} |"
        )
    return "\n".join(out)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Tierkeeper storage-core benchmarks (issue 3)")
    p.add_argument("--size-mib", type=int, default=1024, help="value bytes to produce (default 1024)")
    p.add_argument("--segment-mib", type=int, default=128, help="topic segment.bytes in MiB (default 128)")
    p.add_argument("--value-bytes", type=int, default=1000)
    p.add_argument("--batch-bytes", type=int, default=1_000_000, help="producer batch.size (default 1 MB)")
    p.add_argument(
        "--copy-rounds", type=int, default=3, help="whole-partition copy rounds per target (default 3)"
    )
    p.add_argument(
        "--file-copy-rounds",
        type=int,
        default=8,
        help="copy rounds for file:// (cheap, and noisier: page-cache writeback; default 8, "
        "two passes over the balanced order of its four methods)",
    )
    p.add_argument(
        "--copy-per-segment",
        action="store_true",
        help="time one copy pass per segment against that segment's raw put (default: whole partition)",
    )
    p.add_argument(
        "--read-rounds",
        type=int,
        default=2,
        help="read rounds; each reads every segment with all three methods (default 2)",
    )
    p.add_argument("--targets", default="file,s3", help="comma list of file, s3 (default both)")
    p.add_argument(
        "--block-mib",
        type=float,
        default=ReadOptions().block_bytes / MiB,
        help="read block (default: the reader's)",
    )
    p.add_argument(
        "--depth",
        type=int,
        default=ReadOptions().readahead_blocks,
        help="read-ahead blocks (default: the reader's)",
    )
    p.add_argument("--skip-rss", action="store_true")
    p.add_argument("--tmp", default=None, help="parent of the temp dir (default: the system's)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    p.add_argument("--json", help="also write all measurements here")
    return p.parse_args()


def main() -> int:
    ns = parse_args()
    targets = [t.strip() for t in ns.targets.split(",") if t.strip()]
    read_options = ReadOptions(block_bytes=int(ns.block_mib * MiB), readahead_blocks=ns.depth)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="tierkeeper-storage-bench-", dir=ns.tmp))
    moto: MotoServer | None = None
    res = Results(machine_notes(), {})
    try:
        log_dir, lso, res.data = prepare(workdir, ns)
        log(f"data: {res.data}")
        for target in targets:
            if target == "file":
                url, options = f"file://{workdir / 'remote'}", {}
            elif target == "s3":
                moto = moto or MotoServer(workdir / "moto").start()
                options = moto.storage_options()
                RemoteStore("s3://tk-bench", options).fs.mkdir("tk-bench")
                url = "s3://tk-bench"
            else:
                raise SystemExit(f"unknown target {target!r}")
            copy_rounds = ns.file_copy_rounds if target == "file" else ns.copy_rounds
            read_url = bench_copy(
                target, url, options, log_dir, lso, copy_rounds, ns.copy_per_segment, moto, res
            )
            bench_read(target, read_url, options, read_options, ns.read_rounds, moto, res)
            if not ns.skip_rss:
                bench_rss(target, url, read_url, options, log_dir, lso, workdir, res)
    finally:
        if moto is not None:
            moto.stop()
        if ns.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    res.machine.update(
        loadavg_end=os.getloadavg(),
        cpu_pressure_end=m.cpu_pressure(),
        total_seconds=round(time.monotonic() - started),
    )
    print(table(res.rows))
    print(f"\nmachine: {res.machine}\ndata: {res.data}")
    if ns.json:
        Path(ns.json).write_text(json.dumps(asdict(res), indent=2, default=str))
    return 0 if all(r.met is not False for r in res.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
