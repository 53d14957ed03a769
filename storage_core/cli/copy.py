"""``tierkeeper copy``: tier the eligible segments of a broker log dir to the remote tier."""

from __future__ import annotations

import argparse
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from storage_core.cli.common import (
    add_rate_limit_arg,
    add_remote_args,
    add_result_file_arg,
    emit_json,
    open_store,
    progress_bar,
    rate_limiter,
    require_positive,
    storage_options,
    write_result_file,
)
from storage_core.cli.kafka_client import add_kafka_client_args, kafka_client_config
from storage_core.errors import ConfigError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "copy",
        help="copy rolled, stable segments of a log dir to the remote tier",
        description="Copy every eligible segment (rolled, below the last stable offset, "
        "not yet tiered) of a broker log dir, oldest first, per partition.",
    )
    p.add_argument("--log-dir", required=True, help="the broker's log dir (one entry of log.dirs)")
    p.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="Kafka to ask for last stable offsets (needed for transactional topics)",
    )
    p.add_argument(
        "--assume-tierable",
        action="store_true",
        help="without --bootstrap-servers copy cannot read the topics' configs: assert that every topic "
        "copied has cleanup.policy=delete and remote.storage.enable=false (compacted and Kafka-tiered "
        "topics are refused; the log dir's cleaner checkpoint is still checked)",
    )
    p.add_argument("--topic", action="append", metavar="T", help="only this topic (repeatable)")
    p.add_argument(
        "--assignment",
        action="append",
        metavar="TOPIC=P[,P...]",
        help="copy exactly these partitions of TOPIC (repeatable; what the operator's copy Jobs pass for "
        "the partitions their broker leads); a listed partition missing from the log dir fails",
    )
    p.add_argument("--broker-id", type=int, help="recorded in the segment metadata")
    p.add_argument("--parallelism", type=int, default=4, help="partitions copied at once (default 4)")
    p.add_argument(
        "--segments-in-flight",
        type=int,
        metavar="N",
        help="segments of one partition stored at once (default: 2 on a local filesystem, where each "
        "copy keeps a core busy; 1 on object stores, where one upload already sends several "
        "parts at once); up to --parallelism times this many copies run at once",
    )
    add_rate_limit_arg(
        p,
        "cap the segment bytes read and shipped per second, over all partitions (default: "
        "no cap), so tiering leaves the broker's disk to the broker",
    )
    p.add_argument(
        "--no-fsync",
        action="store_true",
        help="file:// targets: leave written data in the page cache instead of flushing it before "
        "COPY_FINISHED (faster; an OS crash may then leave finished segments with lost data, "
        "so use it only where the target's durability comes from elsewhere)",
    )
    p.add_argument(
        "--engine",
        choices=["threads", "spark"],
        default="threads",
        help="run the partitions on threads of this process (default) or as tasks of a local Spark "
        "session (local[--parallelism]; copy reads this node's log dir, so never a cluster)",
    )
    p.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark setting (--engine spark)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable summary on stdout")
    add_result_file_arg(p)
    add_kafka_client_args(p)
    add_remote_args(p)
    p.set_defaults(handler=run)


def _run_on_spark(args: argparse.Namespace, tasks: list[Any]) -> list[Any]:
    from storage_core.jobs.copy_spark import run_copy_spark, spark_master
    from storage_core.jobs.spark_session import parse_conf, spark_session

    spark = spark_session("tierkeeper-copy", spark_master(args.parallelism), parse_conf(args.spark_conf))
    try:
        return run_copy_spark(
            spark,
            tasks,
            parallelism=args.parallelism,
            fsync=not args.no_fsync,
            bytes_per_second=args.max_bytes_per_second,
        )
    finally:
        spark.stop()


def run(args: argparse.Namespace) -> int:
    from storage_core.logdir import LogDir
    from storage_core.throttle import limited
    from storage_core.tiering.eligibility import copy_refusal
    from storage_core.tiering.partition_copy import copy_partition
    from storage_core.tiering.plan import CopyTask

    require_positive(args, "parallelism", "segments_in_flight")
    limiter = rate_limiter(args)
    if not args.bootstrap_servers and not args.assume_tierable:
        raise ConfigError(
            "without --bootstrap-servers the topics' cleanup.policy and remote.storage.enable cannot be "
            "checked; pass --bootstrap-servers, or --assume-tierable to assert they are tierable"
        )
    from storage_core.formats.segment_files import TopicPartition

    log_dir = LogDir(args.log_dir)
    if args.assignment:
        wanted = parse_assignments(args.assignment)
    else:
        wanted = [(p.topic, p.partition) for p in log_dir.partitions(set(args.topic) if args.topic else None)]
    checkpoints = log_dir.checkpoints()
    lso: dict[tuple[str, int], int] = {}
    configs: dict[str, dict[str, str]] = {}
    refused: list[str] = []
    if args.bootstrap_servers:
        from storage_core.adapters.kafka_admin import KafkaAdmin

        admin = KafkaAdmin(args.bootstrap_servers, kafka_client_config(args))
        configs = {topic: admin.topic_configs(topic) for topic in sorted({topic for topic, _ in wanted})}
        # One line per refused topic, before anything is written; the tasks carry the configs too, so a
        # copy driven from elsewhere (Spark, the operator) refuses the same way.
        for topic, topic_configs in configs.items():
            refusal = copy_refusal(topic, topic_configs)
            if refusal is not None:
                refused.append(str(refusal))
        wanted = [
            (topic, partition) for topic, partition in wanted if copy_refusal(topic, configs[topic]) is None
        ]
        lso = admin.last_stable_offsets(wanted)
    store = open_store(args, fsync=not args.no_fsync)
    tasks = [
        CopyTask(
            log_dir=str(log_dir.path),
            topic=topic,
            partition=partition,
            remote_url=args.remote,
            storage_options=storage_options(args),
            last_stable_offset=lso.get((topic, partition)),
            high_watermark=checkpoints.high_watermarks.get(TopicPartition(topic, partition)),
            broker_id=args.broker_id,
            segments_in_flight=args.segments_in_flight,
            topic_configs=configs.get(topic) if args.bootstrap_servers else None,
        )
        for topic, partition in wanted
    ]
    if args.engine == "spark":
        results = _run_on_spark(args, tasks)
    else:
        lock = threading.Lock()
        with progress_bar(total=None, desc="copy", enabled=not args.json) as bar:

            def advance(n: int) -> None:
                with lock:
                    bar.update(n)

            report = limited(advance, limiter)
            with ThreadPoolExecutor(max_workers=args.parallelism) as pool:
                results = list(pool.map(lambda t: copy_partition(t, store, report), tasks))
    failed = [r for r in results if r.error]
    if args.result_file:
        from storage_core.reconcile.results import encode_copy

        write_result_file(args.result_file, encode_copy([r.__dict__ for r in results]))
    if args.json:
        emit_json(
            {
                "partitions": [r.__dict__ for r in results],
                "copied_segments": sum(r.copied_segments for r in results),
                "copied_bytes": sum(r.copied_bytes for r in results),
                "failed_partitions": len(failed),
                "refused_topics": refused,
            }
        )
    else:
        copied = sum(r.copied_segments for r in results)
        size = sum(r.copied_bytes for r in results)
        print(f"copied {copied} segments ({size} bytes) from {len(results)} partitions; {len(failed)} failed")
    for line in refused:
        print(f"tierkeeper copy: error: {line}", file=sys.stderr)
    for r in failed:
        where = f"{r.topic}-{r.partition}"
        reason = r.error if (r.error or "").startswith(where) else f"{where}: {r.error}"
        print(f"tierkeeper copy: error: {reason}", file=sys.stderr)
    return 1 if failed or refused else 0


def parse_assignments(values: list[str]) -> list[tuple[str, int]]:
    """``["orders=0,3", "events=1"]`` -> ``[("orders", 0), ("orders", 3), ("events", 1)]``."""
    out: list[tuple[str, int]] = []
    for value in values:
        topic, sep, numbers = value.rpartition("=")
        try:
            partitions = [int(n) for n in numbers.split(",")]
        except ValueError:
            partitions = []
        if not sep or not topic or not partitions or min(partitions) < 0:
            raise ConfigError(f"--assignment {value!r}: expected TOPIC=P[,P...] with partition numbers >= 0")
        out += [(topic, p) for p in partitions]
    return out
