"""``tierkeeper recover``: recreate a deleted topic and make its tiered history readable again."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, Any

from storage_core.cli.common import (
    add_bytes_arg,
    add_dry_run_arg,
    add_rate_limit_arg,
    add_remote_args,
    emit_json,
    is_credential_option,
    key_values,
    open_store,
    rate_limiter,
    require_positive,
)
from storage_core.cli.spark_args import add_engine_arg, add_spark_args, spark_conf
from storage_core.cli.subcommand import Subcommand

if TYPE_CHECKING:
    from storage_core.jobs.recover import RecoverySummary


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True)
    p.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT")
    p.add_argument("--topic-id", help="the incarnation to recover, when the remote tier holds several")
    p.add_argument(
        "--replication-factor", type=int, metavar="N", help="for a created topic (default: min(3, brokers))"
    )
    sizing = p.add_mutually_exclusive_group()
    sizing.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="partition count (default: the remote incarnation's, which misses trailing partitions "
        "that never tiered a segment)",
    )
    sizing.add_argument(
        "--partitions-from-remote",
        action="store_true",
        help="size the topic from the remote incarnation, adding partitions to an existing smaller one",
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topic config for a created topic (repeatable), e.g. retention.ms=-1",
    )
    p.add_argument(
        "--allow-non-empty",
        action="store_true",
        help="restore into an existing topic that already holds other data (appends after it)",
    )
    p.add_argument(
        "--no-restore",
        action="store_true",
        help="only recreate the topic; the history stays readable from the remote tier",
    )
    p.add_argument(
        "--transaction-records",
        type=int,
        default=10_000,
        metavar="N",
        help="records per restore transaction (default 10000)",
    )
    add_bytes_arg(p, "--transaction-bytes", 16 << 20, "bytes per restore transaction (default {default})")
    add_rate_limit_arg(p, "throttle the restore (default: unlimited)")
    add_dry_run_arg(p, "report the plan")
    p.add_argument("--json", action="store_true", help="machine-readable summary on stdout")
    add_engine_arg(p, "restore", "partition")
    add_remote_args(p)
    add_spark_args(p)


class _Bars:
    """One progress bar per partition, in offsets of the old log, on stderr."""

    def __init__(self, topic: str, enabled: bool) -> None:
        self.topic = topic
        self.enabled = enabled and sys.stderr.isatty()
        self._bar: Any = None

    def partition_started(self, partition: int, offsets: int) -> None:
        from tqdm import tqdm

        self._bar = tqdm(
            total=offsets,
            desc=f"restore {self.topic}-{partition}",
            unit="offset",
            unit_scale=True,
            disable=not self.enabled,
            file=sys.stderr,
        )

    def advance(self, offsets: int) -> None:
        if self._bar is not None:
            self._bar.update(offsets)

    def partition_done(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def read_command(args: argparse.Namespace, topic_id: str, partition: int, offset: int | None) -> str:
    """The exact ``tierkeeper read`` command that reads the old incarnation from the same remote tier."""
    argv = ["tierkeeper", "read", "--remote", args.remote]
    for flag, value in (("--endpoint-url", args.endpoint_url), ("--region", args.region)):
        if value:
            argv += [flag, value]
    argv += ["--anonymous"] if args.anonymous else []
    argv += ["--path-style"] if args.path_style else []
    if args.storage_options_file:
        argv += ["--storage-options-file", args.storage_options_file]
    for option in args.storage_option:
        # Credentials given on the command line are not repeated in our output: pass them again through
        # TIERKEEPER_STORAGE_OPTION_<KEY> or --storage-options-file.
        if not is_credential_option(option.partition("=")[0]):
            argv += ["--storage-option", option]
    argv += [
        "--topic",
        args.topic,
        "--topic-id",
        topic_id,
        "--partition",
        str(partition),
        "--from-offset",
        str(offset or 0),
    ]
    return shlex.join(argv)


def run(args: argparse.Namespace) -> int:
    from storage_core.adapters.kafka_admin import KafkaAdmin
    from storage_core.jobs.recover import RecoverRequest, recover
    from storage_core.recovery.plan import PlanOptions
    from storage_core.recovery.restore import ChunkLimits

    require_positive(args, "replication_factor", "partitions", "transaction_records", "transaction_bytes")
    request = RecoverRequest(
        topic=args.topic,
        bootstrap_servers=args.bootstrap_servers,
        topic_id=args.topic_id,
        options=PlanOptions(
            replication_factor=args.replication_factor,
            partitions=args.partitions,
            partitions_from_remote=args.partitions_from_remote,
            allow_non_empty=args.allow_non_empty,
            restore=not args.no_restore,
        ),
        topic_config=key_values(args.config, "--config"),
        dry_run=args.dry_run,
        limits=ChunkLimits(records=args.transaction_records, bytes=args.transaction_bytes),
        limiter=rate_limiter(args),
    )
    sessions: list[Any] = []
    runner = None
    if args.engine == "spark":
        from storage_core.jobs.recover_spark import spark_runner
        from storage_core.jobs.spark_session import spark_session

        conf = spark_conf(args)

        def session() -> Any:
            sessions.append(spark_session("tierkeeper-recover", args.spark_master, conf))
            return sessions[-1]

        runner = spark_runner(session, args.max_bytes_per_second)
    try:
        summary = recover(
            open_store(args, existing=True),
            KafkaAdmin(args.bootstrap_servers),
            request,
            _Bars(args.topic, enabled=not args.json),
            run_partitions=runner,
        )
    finally:
        for spark in sessions:
            spark.stop()
    commands = [
        read_command(args, summary.source_topic_id, ps.partition, ps.old_start)
        for ps in summary.partition_summaries
    ]
    if args.json:
        emit_json({**summary.to_json(), "read_commands": commands})
        return 0
    _print_text(summary, commands)
    return 0


COMMAND = Subcommand(
    "recover",
    help="recreate a deleted topic from the remote tier and restore its history",
    description="Find the deleted topic's incarnation in the remote tier, recreate the topic in Kafka "
    "and re-produce its committed history into it exactly once (resumable). The old incarnation stays "
    "readable with `tierkeeper read --topic-id`.",
    add_args=add_args,
    run=run,
)


def _print_text(summary: RecoverySummary, commands: list[str]) -> None:
    verb = {"create": "create", "reuse": "reuse the existing empty", "resume": "resume into"}[summary.action]
    if summary.dry_run:
        rf = f", replication factor {summary.replication_factor}" if summary.replication_factor else ""
        print(
            f"dry run: would {verb} topic {summary.topic} ({summary.partitions} partitions{rf}) and "
            f"{'restore' if summary.restore else 'not restore'} incarnation {summary.source_description}"
        )
    else:
        print(
            f"recovered topic {summary.topic} (topic id {summary.target_topic_id}, {summary.action}, "
            f"{summary.partitions} partitions) from incarnation {summary.source_description}"
        )
    for ps in summary.partition_summaries:
        if ps.segments == 0:
            print(f"  partition {ps.partition}: nothing tiered")
            continue
        line = (
            f"  partition {ps.partition}: old offsets {ps.old_start}..{ps.old_end} ({ps.segments} segments)"
        )
        if summary.dry_run or not summary.restore:
            line += f", {ps.restored_before} records restored before, next old offset {ps.next_old}"
        else:
            runs = ps.mapping or []
            if runs:
                line += f" -> new offsets {runs[0].new_start}..{runs[-1].new_end}"
            line += f", {ps.restored_total} records ({ps.restored_now} in this run)"
            if ps.mapping is None:
                line += ", offset mapping incomplete (an earlier run's record is missing)"
            elif any(r.new_start != r.old_start for r in runs):
                line += f", offsets shifted ({len(runs)} runs in the --json mapping)"
        print(line)
    print("the old incarnation stays readable from the remote tier:")
    print(f"  {commands[0]}" if commands else "  (no partition)")
    if len(commands) > 1:
        print(f"  (partitions 0..{len(commands) - 1}: change --partition and --from-offset)")
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)
