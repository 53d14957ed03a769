"""``tierkeeper cleanup``: remote retention, the orphan sweep and (with a broker) the safe local trim."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from storage_core.cli.common import (
    add_dry_run_arg,
    add_remote_args,
    add_result_file_arg,
    emit_json,
    open_store,
    require_positive,
    write_result_file,
)
from storage_core.cli.kafka_client import add_kafka_client_args, kafka_client_config
from storage_core.cli.spark_args import add_engine_arg, add_spark_args, spark_conf
from storage_core.cli.subcommand import Subcommand


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", action="append", metavar="T", help="only this topic (repeatable)")
    p.add_argument(
        "--bootstrap-servers", metavar="HOST:PORT", help="enables the local trim and log-start rule"
    )
    p.add_argument(
        "--log-dir",
        action="append",
        help="a broker log dir, to count untiered local bytes toward local retention.bytes (repeat it for "
        "every log dir of a JBOD broker)",
    )
    p.add_argument("--remote-retention-ms", type=int, help="default: the topic's retention.ms (or unlimited)")
    p.add_argument(
        "--remote-retention-bytes", type=int, help="default: the topic's retention.bytes (or unlimited)"
    )
    p.add_argument(
        "--local-retention-ms", type=int, help="default: the topic's local.retention.ms (or no trim)"
    )
    p.add_argument(
        "--local-retention-bytes", type=int, help="default: the topic's local.retention.bytes (or no trim)"
    )
    p.add_argument(
        "--copy-interval-ms",
        type=int,
        help="how often copy and cleanup run (default 1 h): the local trim is refused for topics whose "
        "Kafka retention could delete segments before they are tiered with this interval "
        "(docs/reliability.md, 'The retention rules, precisely')",
    )
    p.add_argument(
        "--orphan-grace-ms",
        type=int,
        default=6 * 3600 * 1000,
        help="age before an unfinished copy attempt counts as orphaned (default 6 h)",
    )
    p.add_argument(
        "--ignore-log-start",
        action="store_true",
        help="never delete remote data because Kafka's log start offset moved past it",
    )
    p.add_argument(
        "--delete-topic",
        metavar="T",
        help="delete ALL remote data of topic T (every incarnation, or the one given with --topic-id)",
    )
    p.add_argument("--topic-id", help="with --delete-topic: only this incarnation")
    p.add_argument(
        "--missing-ok",
        action="store_true",
        help="with --delete-topic: a topic with nothing in the remote tier is not an error",
    )
    add_trim_hold_args(p)
    add_dry_run_arg(p, "report what would be deleted or trimmed")
    add_engine_arg(p, "clean", "topic-partition")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    add_result_file_arg(p)
    add_kafka_client_args(p)
    add_remote_args(p)
    add_spark_args(p)


def add_trim_hold_args(p: argparse.ArgumentParser) -> None:
    """The trimHold settings (storage_core.api.trim_hold): consumer groups reading the brokers directly
    hold the local trim at their committed offsets, within these bounds."""
    p.add_argument(
        "--no-trim-hold",
        action="store_true",
        help="trim by the local window alone: direct readers' committed offsets do not hold the trim",
    )
    p.add_argument(
        "--trim-hold-max-age-ms",
        type=int,
        help="never keep a tiered segment for a group once its newest record is older (default 7 days; -1: "
        "no age bound)",
    )
    p.add_argument(
        "--trim-hold-max-bytes",
        type=int,
        help="per-partition bytes the hold may keep beyond the local window (default -1: no size bound)",
    )
    p.add_argument(
        "--trim-hold-inactive-group-ms",
        type=int,
        help="a group with no members for longer stops holding (default 7 days; -1: never)",
    )
    p.add_argument(
        "--trim-hold-ignore-group",
        action="append",
        metavar="GROUP",
        help="a group id, or a prefix ending in *, that never holds the trim (repeatable)",
    )


RETENTION_FLAGS = (
    "remote_retention_ms",
    "remote_retention_bytes",
    "local_retention_ms",
    "local_retention_bytes",
)


def cleanup_options_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~storage_core.jobs.cleanup.CleanupOptions` these flags ask for (the operator's cleanup
    Jobs pass a ``CleanupRequest``'s arguments; a test proves they come back as the in-process
    executor's options)."""
    from storage_core.jobs.cleanup import CleanupOptions
    from storage_core.reconcile.requests import trim_hold_from_args
    from storage_core.tiering.eligibility import TrimTiming

    require_positive(args, "copy_interval_ms")
    # The flags are spelled as the options' fields.
    same = ("bootstrap_servers", "orphan_grace_ms", "dry_run", *RETENTION_FLAGS)
    return CleanupOptions(
        topics=set(args.topic) if args.topic else None,
        log_dirs=tuple(args.log_dir or ()),
        kafka_config=kafka_client_config(args),
        use_log_start=not args.ignore_log_start,
        now_ms=int(time.time() * 1000),
        trim_timing=TrimTiming() if args.copy_interval_ms is None else TrimTiming(args.copy_interval_ms),
        trim_hold=trim_hold_from_args(args),
        **{name: getattr(args, name) for name in same},
    )


def run(args: argparse.Namespace) -> int:
    from storage_core.jobs.cleanup import delete_topic, run_cleanup, run_cleanup_on_spark

    require_positive(args, "copy_interval_ms")
    store = open_store(args)
    if args.delete_topic:
        report = delete_topic(store, args.delete_topic, topic_id=args.topic_id, dry_run=args.dry_run)
        if args.missing_ok and not report["deleted_topics"]:
            report["errors"] = []
    else:
        options = cleanup_options_from_args(args)
        if args.engine == "spark":
            report = run_cleanup_on_spark(store, options, args.spark_master, spark_conf(args))
        else:
            report = run_cleanup(store, options)
    if args.result_file:
        from storage_core.reconcile.results import encode_cleanup

        write_result_file(args.result_file, encode_cleanup(report))
    if args.json:
        emit_json(report)
    else:
        _print(report)
    for error in report.get("errors", []):
        print(f"tierkeeper cleanup: error: {error}", file=sys.stderr)
    return 1 if report.get("errors") else 0


COMMAND = Subcommand(
    "cleanup",
    help="enforce remote retention, sweep orphans, trim local data that is safely tiered",
    description="Delete remote segments beyond remote retention or below the log start offset, finish "
    "interrupted deletes, remove orphaned copy attempts, and (with --bootstrap-servers) advance each "
    "partition's log start offset through DeleteRecords to its local retention window, never past the "
    "highest tiered offset + 1.",
    add_args=add_args,
    run=run,
)


def _print(report: dict[str, Any]) -> None:
    verb = "would delete" if report.get("dry_run") else "deleted"
    for part in report.get("partitions", []):
        name = f"{part['topic']}-{part['partition']}"
        for d in part["deleted"]:
            span = f"{d['base_offset']}-{d['end_offset']}"
            print(f"{name}: {verb} segment {span} ({d['bytes']} bytes): {d['reason']}")
        if part["resumed"] or part["orphans_removed"] or part["duplicates_removed"]:
            print(
                f"{name}: finished {part['resumed']} interrupted deletes, swept {part['orphans_removed']} "
                f"orphans, removed {part['duplicates_removed']} duplicate copies"
            )
        for divergence in part.get("divergent", []):
            print(f"{name}: kept, needs an operator: {divergence}", file=sys.stderr)
        trim = part.get("local_trim")
        if trim:
            print(
                f"{name}: {'would trim' if report.get('dry_run') else 'trimmed'} local log "
                f"{trim['from']} -> {trim['to']} ("
                + (
                    f"highest tiered offset {trim['tiered_end']}"
                    if trim["tiered_end"] is not None
                    else f"the tier is empty: remote retention expired below {trim['expired_remotely']}"
                )
                + ")"
            )
        _print_hold(name, part.get("trim_hold"))
    for topic in report.get("deleted_topics", []):
        print(
            f"{verb} the tier of {topic['topic']} (id {topic['topic_id']}): {topic['bytes']} bytes, "
            f"{len(topic.get('uploads_aborted', []))} unfinished uploads"
        )
    for key in report.get("stale_uploads_aborted", []):
        print(f"{'would abort' if report.get('dry_run') else 'aborted'} unfinished multipart upload of {key}")
    partitions = len(report.get("partitions", []))
    print(f"{verb} {report.get('bytes_deleted', 0)} remote bytes; {partitions} partitions")


def _print_hold(name: str, hold: dict[str, Any] | None) -> None:
    """What holds the partition's trim (``trim_hold`` of the report), one line per group."""
    if not hold:
        return
    if "unknown" in hold:
        print(f"{name}: local trim held where it was: {hold['unknown']}")
        return
    where = hold["to"] if hold["to"] is not None else "the log start"
    for held in hold["held_by"]:
        print(f"{name}: local trim held at {where} by group {held['group']} (committed {held['offset']})")
    for passed in hold["overridden"]:
        print(
            f"{name}: trim passes group {passed['group']} ({passed['reason']}): it misses offsets "
            f"{passed['offset']}..{passed['to'] - 1} on the brokers"
        )
