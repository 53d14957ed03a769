"""``tierkeeper standalone``: the operator's reconcile decisions without Kubernetes.

Reads the same TieredTopic/TieredBroker YAML as the operator (log dirs as local paths) and the cluster
configurations, runs copy and cleanup in this process, and prints each resource's status as a table.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from typing import Any

from storage_core.api.trim_hold_status import TRIM_HELD
from storage_core.cli.common import emit_json, require_above_zero
from storage_core.cli.subcommand import Subcommand


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cluster",
        action="append",
        default=[],
        type=Path,
        metavar="CLUSTER.yaml",
        help="cluster configuration file (repeatable; one or more clusters per file); optional when the "
        "manifests hold TieredClusters",
    )
    p.add_argument(
        "--manifests",
        required=True,
        type=Path,
        metavar="DIR",
        help="directory of TieredTopic/TieredBroker/TieredCluster YAML files",
    )
    p.add_argument(
        "--once", action="store_true", help="run one round and exit (non-zero if any is not Ready)"
    )
    p.add_argument(
        "--poll-seconds",
        type=float,
        default=10.0,
        help="seconds between rounds without --once (default 10); each topic's own copy and cleanup "
        "intervals decide what runs",
    )
    p.add_argument(
        "--approve-fetchers",
        action="store_true",
        help="apply every TieredBroker's num.replica.fetchers proposal (as spec.replicaFetchers.autoApprove "
        "does per broker); without it proposals are only shown",
    )
    p.add_argument(
        "--kafka-config-dir",
        action="append",
        default=[],
        metavar="CLUSTER=DIR",
        help="a cluster's secret client properties (its clientConfigSecretRef): a directory with one file "
        "per property (sasl.username, sasl.password, ...), as Kubernetes mounts a Secret; repeatable",
    )
    p.add_argument("--json", action="store_true", help="print the statuses as JSON instead of a table")


def _ready(status: Any) -> str:
    for condition in status.conditions:
        if condition.type == "Ready":
            return str(condition.status)
    return "Unknown"


def status_table(runner: Any) -> str:
    """The statuses as ``kubectl get`` would show them: one line per resource."""
    rows = [
        (
            "KIND",
            "NAME",
            "READY",
            "REMOTE SEGMENTS",
            "REMOTE BYTES",
            "LAG BYTES",
            "HELD",
            "LAST COPY",
            "STATUS",
        )
    ]
    for obj in runner.topics:
        status = runner.topic_status[obj.key]
        remote, lag, last, hold = status.remote, status.copy_lag, status.last_copy, status.trim_hold
        rows.append(
            (
                "TieredTopic",
                obj.key,
                _ready(status),
                str(remote.segments) if remote else "-",
                str(remote.bytes) if remote else "-",
                str(lag.bytes) if lag else "-",
                str(hold.held_partitions) if hold else "-",
                last.result if last else "-",
                status.message,
            )
        )
    for obj in runner.brokers:
        status = runner.broker_status[obj.key]
        last = status.last_copy
        rows.append(
            (
                "TieredBroker",
                obj.key,
                _ready(status),
                "-",
                "-",
                "-",
                "-",
                last.result if last else "-",
                status.message,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows
    )


def trim_hold_lines(runner: Any) -> list[str]:
    """One line per TieredTopic whose trim direct readers hold (its TrimHeld reason and message)."""
    out = []
    for obj in runner.topics:
        held = next((c for c in runner.topic_status[obj.key].conditions if c.type == TRIM_HELD), None)
        if held is not None:
            out.append(f"trim hold {obj.key}: {held.reason}: {held.message}")
    return out


def _statuses(runner: Any) -> dict[str, Any]:
    return {
        "tieredTopics": {
            key: s.model_dump(by_alias=True, mode="json", exclude_none=True)
            for key, s in runner.topic_status.items()
        },
        "tieredBrokers": {
            key: s.model_dump(by_alias=True, mode="json", exclude_none=True)
            for key, s in runner.broker_status.items()
        },
    }


def _show(runner: Any, report: Any, as_json: bool) -> None:
    if as_json:
        emit_json(_statuses(runner))
        return
    for event in report.events:
        print(f"{event.type} {event.reason} {event.key}: {event.message}")
    done = [f"copy from broker {c.broker_id}" for c in report.copies] + [
        f"cleanup of {c.topic}" for c in report.cleanups
    ]
    print(f"ran: {', '.join(done) if done else 'nothing due'}")
    print(status_table(runner), flush=True)
    for line in trim_hold_lines(runner):
        print(line)
    for obj in runner.brokers:
        fetchers = runner.broker_status[obj.key].fetchers
        if fetchers is not None:
            print(f"fetchers {obj.key}: {fetchers.phase}: {fetchers.message}")
            if fetchers.explanation and fetchers.phase != "Balanced":
                print(f"  {fetchers.explanation}")


def run(args: argparse.Namespace) -> int:
    from storage_core.adapters.kafka_client_config import parse_config_dirs
    from storage_core.jobs.resource_files import load_clusters, load_manifests, manifest_clusters
    from storage_core.jobs.standalone import Standalone

    require_above_zero(args, "poll_seconds")
    mounted = {item.partition("=")[0] for item in args.kafka_config_dir}
    manifests = load_manifests(args.manifests)
    clusters = manifest_clusters(manifests, load_clusters(args.cluster, mounted=mounted), mounted=mounted)
    if not clusters:
        from storage_core.errors import ConfigError

        raise ConfigError(f"{args.manifests}: no TieredCluster manifests and no --cluster FILE: give one")
    runner = Standalone(
        clusters,
        manifests,
        approve_fetchers=args.approve_fetchers,
        kafka_config_dirs=parse_config_dirs(args.kafka_config_dir, clusters),
    )
    if not runner.topics and not runner.brokers:
        from storage_core.errors import ConfigError

        raise ConfigError(f"{args.manifests}: no TieredTopic or TieredBroker manifests")
    if args.once:
        report = runner.run_round()
        _show(runner, report, args.json)
        everything = [*runner.topic_status.values(), *runner.broker_status.values()]
        return 0 if all(_ready(s) == "True" for s in everything) else 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set():
        _show(runner, runner.run_round(), args.json)
        stop.wait(args.poll_seconds)
    return 0


COMMAND = Subcommand(
    "standalone",
    help="run the operator's reconcile loop without Kubernetes (local log dirs)",
    description="Reconcile TieredTopic/TieredBroker manifests against Kafka and the remote tier in "
    "this process: copy from each partition leader's log dir, clean up, trim local data behind the "
    "tier, and print the status.",
    add_args=add_args,
    run=run,
)
