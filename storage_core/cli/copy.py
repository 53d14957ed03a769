"""``tierkeeper copy``: tier the eligible segments of a broker log dir to the remote tier."""

from __future__ import annotations

import argparse
import sys
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
from storage_core.cli.spark_args import add_spark_conf_arg, spark_conf
from storage_core.cli.subcommand import Subcommand
from storage_core.errors import ConfigError


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-dir",
        required=True,
        action="append",
        help="a log dir of the broker (an entry of log.dirs); repeat it for every entry of a JBOD broker, "
        "each partition is read from the dir holding it",
    )
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
    add_spark_conf_arg(p, "Spark setting (--engine spark)")
    p.add_argument("--json", action="store_true", help="machine-readable summary on stdout")
    add_result_file_arg(p)
    add_kafka_client_args(p)
    add_remote_args(p)


def copy_options_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~storage_core.jobs.copy.CopyOptions` these flags ask for (the operator's copy Jobs
    pass a ``CopyRequest``'s arguments; a test proves they come back as the in-process executor's)."""
    from storage_core.jobs.copy import CopyOptions

    require_positive(args, "parallelism", "segments_in_flight")
    rate_limiter(args)  # refuses a rate <= 0
    if not args.bootstrap_servers and not args.assume_tierable:
        raise ConfigError(
            "without --bootstrap-servers the topics' cleanup.policy and remote.storage.enable cannot be "
            "checked; pass --bootstrap-servers, or --assume-tierable to assert they are tierable"
        )
    # The flags are spelled as the options' fields.
    same = ("broker_id", "parallelism", "segments_in_flight", "max_bytes_per_second", "engine")
    return CopyOptions(
        log_dirs=tuple(args.log_dir),
        remote_url=args.remote,
        storage_options=storage_options(args),
        bootstrap_servers=args.bootstrap_servers or None,
        kafka_config=kafka_client_config(args) if args.bootstrap_servers else {},
        assignment=tuple(parse_assignments(args.assignment)) if args.assignment else None,
        topics=frozenset(args.topic) if args.topic else None,
        fsync=not args.no_fsync,
        spark_conf=spark_conf(args),
        **{name: getattr(args, name) for name in same},
    )


def run(args: argparse.Namespace) -> int:
    from storage_core.jobs.copy import run_copy

    options = copy_options_from_args(args)
    store = open_store(args, fsync=options.fsync)
    with progress_bar(total=None, desc="copy", enabled=not args.json and options.engine == "threads") as bar:
        report = run_copy(options, store, progress=bar.update)
    if args.result_file:
        from storage_core.reconcile.results import encode_copy

        write_result_file(args.result_file, encode_copy(report.rows()))
    if args.json:
        emit_json(report.summary())
    else:
        print(
            f"copied {report.copied_segments} segments ({report.copied_bytes} bytes) from "
            f"{len(report.partitions)} partitions; {len(report.failed)} failed"
        )
    for line in report.refused_topics:
        print(f"tierkeeper copy: error: {line}", file=sys.stderr)
    for r in report.failed:
        where = f"{r.topic}-{r.partition}"
        reason = r.error if (r.error or "").startswith(where) else f"{where}: {r.error}"
        print(f"tierkeeper copy: error: {reason}", file=sys.stderr)
    return 1 if report.failed or report.refused_topics else 0


COMMAND = Subcommand(
    "copy",
    help="copy rolled, stable segments of a log dir to the remote tier",
    description="Copy every eligible segment (rolled, below the last stable offset, "
    "not yet tiered) of a broker log dir, oldest first, per partition.",
    add_args=add_args,
    run=run,
)


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
