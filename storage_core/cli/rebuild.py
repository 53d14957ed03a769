"""``tierkeeper rebuild``: prepare a replaced broker's empty log dir from the remote tier."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from storage_core.cli.common import (
    add_rate_limit_arg,
    add_remote_args,
    emit_json,
    open_store,
    progress_bar,
    rate_limiter,
    require_positive,
)
from storage_core.errors import ConfigError, TierkeeperError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "rebuild",
        help="restore a replaced broker's log dir from the remote tier",
        description="Restore, into the empty log dir of a replaced broker, the tiered segments of every "
        "partition assigned to it that lie inside the local retention window, so the broker replicates only "
        "the untiered tail when it starts. Crash-safe: an interrupted run is completed by the next one, and "
        "Kafka refuses to start on a half-restored dir.",
    )
    p.add_argument("--log-dir", required=True, help="the new broker's log dir (meta.properties only)")
    p.add_argument(
        "--bootstrap-servers", required=True, metavar="HOST:PORT", help="the cluster the broker joins"
    )
    p.add_argument("--broker-id", required=True, type=int, help="node.id of the broker being rebuilt")
    p.add_argument(
        "--local-retention-ms",
        type=int,
        metavar="MS",
        help="restore only segments newer than this (default: the topic's local.retention.ms, "
        "else everything tiered)",
    )
    p.add_argument(
        "--local-retention-bytes",
        type=int,
        metavar="B",
        help="restore at most about this many bytes per partition, newest first (default: the "
        "topic's local.retention.bytes, else everything tiered)",
    )
    p.add_argument(
        "--exclude-topic",
        action="append",
        default=[],
        metavar="T",
        help="leave this topic to plain replication (repeatable)",
    )
    p.add_argument("--parallelism", type=int, default=4, help="downloads at once (default 4)")
    add_rate_limit_arg(p, "cap the bytes restored per second, over all downloads (default: no cap)")
    p.add_argument("--json", action="store_true", help="machine-readable summary on stdout, no progress bar")
    p.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    add_remote_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from storage_core.adapters.kafka_admin import KafkaAdmin
    from storage_core.jobs.rebuild import RebuildOptions, rebuild_log_dir
    from storage_core.rebuild.plan import AssignedPartition

    for name in ("local_retention_ms", "local_retention_bytes"):
        value = getattr(args, name)
        if value is not None and value < -1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= -1 (-1: unlimited), got {value}")
    require_positive(args, "parallelism")
    from storage_core.throttle import limited

    limiter = rate_limiter(args)
    options = RebuildOptions(
        broker_id=args.broker_id,
        parallelism=args.parallelism,
        dry_run=args.dry_run,
        local_retention_ms=args.local_retention_ms,
        local_retention_bytes=args.local_retention_bytes,
    )
    excluded = set(args.exclude_topic)

    def cluster() -> list[AssignedPartition]:
        # The broker being rebuilt is down by design; librdkafka would log every refused connection to it.
        admin = KafkaAdmin(args.bootstrap_servers, {"log_level": "2"})
        described = admin.describe([t for t in admin.topic_names() if t not in excluded])
        mine = [info for info in described.values() if args.broker_id in info.replicas]
        tps = [(i.topic, i.partition) for i in mine]
        starts, ends = admin.log_start_offsets(tps), admin.high_watermarks(tps)
        configs = {topic: admin.topic_configs(topic) for topic in sorted({i.topic for i in mine})}
        return [
            AssignedPartition(
                i.topic,
                i.partition,
                i.topic_id,
                i.leader,
                i.replicas,
                starts[(i.topic, i.partition)],
                ends[(i.topic, i.partition)],
                configs[i.topic],
            )
            for i in mine
        ]

    with progress_bar(total=None, desc="rebuild", enabled=not args.json) as bar:

        def start(total: int) -> None:
            bar.reset(total=total)

        try:
            outcome = rebuild_log_dir(
                args.log_dir,
                open_store(args, existing=True),
                cluster,
                options,
                progress=limited(bar.update, limiter),
                on_start=start,
            )
        except OSError as exc:
            # The log dir is left as it was or resumable; say which file failed, in one line.
            raise TierkeeperError(f"{exc.filename or args.log_dir}: {exc.strerror or exc}") from exc
    restoring = [p for p in outcome.partitions if p.segments]
    if args.json:
        emit_json(
            {
                "action": outcome.action,
                "log_dir": outcome.log_dir,
                "broker_id": args.broker_id,
                "partitions": [p.model_dump() for p in outcome.partitions],
                "restored_partitions": len(restoring),
                "planned_bytes": outcome.planned_bytes,
                "downloaded_bytes": outcome.restore.downloaded_bytes,
                "downloaded_files": outcome.restore.downloaded_files,
                "kept_files": outcome.restore.kept_files,
                "expected_tail": sum(p.expected_tail for p in outcome.partitions),
            }
        )
        return 0
    out = sys.stdout
    verb = {"dry-run": "would restore", "already-rebuilt": "already rebuilt:"}.get(outcome.action, "restored")
    explain = {
        "resumed": " (an interrupted rebuild was found and completed)",
        "installed": " (an interrupted rebuild had restored everything; installed it)",
        "already-rebuilt": " (nothing to do)",
        "dry-run": " (nothing changed)",
        "nothing-to-restore": " (nothing tiered for this broker; it will replicate everything)",
    }
    print(f"{outcome.action}: {outcome.log_dir}{explain.get(outcome.action, '')}", file=out)
    for p in outcome.partitions:
        span = f"[{p.restored_start}, {p.restored_end})" if p.segments else "nothing"
        note = f"  ({p.note})" if p.note else ""
        print(
            f"  {p.topic}-{p.partition}: {span} {p.segments} segments {p.bytes} bytes; "
            f"tail to replicate {p.expected_tail} offsets (leader end {p.leader_end}){note}",
            file=out,
        )
    print(
        f"{verb} {outcome.planned_bytes} bytes in {len(restoring)} of {len(outcome.partitions)} partitions "
        f"(downloaded now: {outcome.restore.downloaded_bytes} bytes); expected tail "
        f"{sum(p.expected_tail for p in outcome.partitions)} offsets",
        file=out,
    )
    return 0
