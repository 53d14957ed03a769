"""``tierkeeper rebuild``: prepare a replaced broker's empty log dir from the remote tier."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from storage_core.cli.common import (
    add_dry_run_arg,
    add_rate_limit_arg,
    add_remote_args,
    add_result_file_arg,
    emit_json,
    progress_bar,
    rate_limiter,
    require_positive,
    retry_policy,
    storage_options,
    write_result_file,
)
from storage_core.cli.kafka_client import add_kafka_client_args, kafka_client_config
from storage_core.cli.subcommand import Subcommand
from storage_core.errors import ConfigError, TierkeeperError


def add_args(p: argparse.ArgumentParser) -> None:
    """No flag that --settings can supply is required here: :class:`_Target` completes them from the
    settings file and names the ones still missing."""
    p.add_argument(
        "--log-dir",
        action="append",
        help="the new broker's log dir (meta.properties only); repeat it for every entry of log.dirs of a "
        "JBOD broker (each partition is restored into one of them; all must be empty)",
    )
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT", help="the cluster the broker joins")
    p.add_argument("--broker-id", type=int, help="node.id of the broker being rebuilt")
    p.add_argument(
        "--if-empty",
        action="store_true",
        help="init-container mode: restore only into an empty (or missing, or unformatted) log dir, "
        "complete an interrupted restore, and exit 0 with a one-line reason when the dir holds data",
    )
    p.add_argument(
        "--settings",
        metavar="FILE",
        help="rebuild settings the operator keeps in the ConfigMap tierkeeper-rebuild-<cluster> (key "
        "settings.json): bootstrap servers, client config, remote tier and each broker's log dir and "
        "policy; flags given explicitly win",
    )
    p.add_argument(
        "--broker-id-from-pod-name",
        metavar="NAME",
        help="take the broker id from the number a pod name ends with (pass $(POD_NAME) from the "
        "downward API): Strimzi node pools and StatefulSets whose node.id is the ordinal",
    )
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
    p.add_argument("--parallelism", type=int, help="downloads at once (default: the settings file's, else 4)")
    add_rate_limit_arg(p, "cap the bytes restored per second, over all downloads (default: no cap)")
    p.add_argument("--json", action="store_true", help="machine-readable summary on stdout, no progress bar")
    add_dry_run_arg(p, "print the plan")
    add_result_file_arg(p)
    add_remote_args(p, required=False)
    add_kafka_client_args(p)


class _Target:
    """Where and what to rebuild: the flags, completed from the settings file."""

    def __init__(self, args: argparse.Namespace) -> None:
        from storage_core.api.rebuild_settings import broker_id_from_pod_name, load_settings

        settings = None
        if args.settings:
            try:
                with open(args.settings, encoding="utf-8") as f:
                    settings = load_settings(f.read(), args.settings)
            except OSError as exc:
                raise ConfigError(f"--settings {args.settings}: {exc.strerror}") from None
        broker_id = args.broker_id
        if broker_id is None and args.broker_id_from_pod_name:
            broker_id = broker_id_from_pod_name(args.broker_id_from_pod_name)
        if broker_id is None:
            raise ConfigError("--broker-id (or --broker-id-from-pod-name) is required")
        self.broker_id: int = broker_id
        self.entry = settings.for_broker(broker_id) if settings is not None else None
        self.settings = settings
        self.log_dirs: list[str] = args.log_dir or (self.entry.log_dirs() if self.entry else [])
        self.bootstrap: str | None = args.bootstrap_servers or (
            settings.bootstrap_servers if settings else None
        )
        self.remote: str | None = args.remote or (settings.remote.url if settings else None)
        # The settings hold only non-secret properties; credentials come from --kafka-config-dir (the
        # cluster's clientConfigSecretRef mounted as files). Flags win over the settings file.
        self.client_config = {**(settings.client_config if settings else {}), **kafka_client_config(args)}
        self.base_options = dict(settings.remote.storage_options) if settings else {}
        self.parallelism: int = args.parallelism or (self.entry.parallelism if self.entry else 4)

    def skip_reason(self) -> str | None:
        """Why the settings say this broker is not rebuilt at all (init-container mode only)."""
        if self.settings is None:
            return None
        if self.entry is None:
            return f"no TieredBroker for broker {self.broker_id} in cluster {self.settings.cluster}"
        if self.entry.policy == "Never":
            return f"TieredBroker {self.entry.tiered_broker} has rebuild policy Never"
        return None

    def require(self) -> None:
        for value, flag in (
            (self.log_dirs, "--log-dir"),
            (self.bootstrap, "--bootstrap-servers"),
            (self.remote, "--remote"),
        ):
            if not value:
                raise ConfigError(
                    f"{flag} is required (or --settings with an entry for broker {self.broker_id})"
                )


def run(args: argparse.Namespace) -> int:
    started = time.time()
    try:
        return _run(args, started)
    except TierkeeperError as exc:
        if args.result_file:
            _write_result(args, failure=str(exc))
        raise


COMMAND = Subcommand(
    "rebuild",
    help="restore a replaced broker's log dir from the remote tier",
    description="Restore, into the empty log dir of a replaced broker, the tiered segments of every "
    "partition assigned to it that lie inside the local retention window, so the broker replicates only "
    "the untiered tail when it starts. Crash-safe: an interrupted run is completed by the next one, and "
    "Kafka refuses to start on a half-restored dir. As a broker pod's init container: --if-empty "
    "--settings FILE --broker-id-from-pod-name $(POD_NAME).",
    add_args=add_args,
    run=run,
)


def _write_result(args: argparse.Namespace, outcome: Any = None, failure: str | None = None) -> None:
    from storage_core.reconcile.rebuild import RebuildResult, encode_result

    result = RebuildResult(failure=failure or "failed") if outcome is None else outcome.result()
    write_result_file(args.result_file, encode_result(result))


def _run(args: argparse.Namespace, started: float) -> int:
    from storage_core.jobs.rebuild import RebuildOptions, RebuildOutcome, rebuild_log_dirs
    from storage_core.rebuild.restore import RestoreProgress

    for name in ("local_retention_ms", "local_retention_bytes"):
        value = getattr(args, name)
        if value is not None and value < -1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= -1 (-1: unlimited), got {value}")
    require_positive(args, "parallelism")
    target = _Target(args)
    skip = target.skip_reason() if args.if_empty else None
    if skip is not None:
        return _report(
            args,
            RebuildOutcome("skipped", ", ".join(target.log_dirs) or "-", [], reason=skip),
            started,
            target.broker_id,
        )
    target.require()
    assert target.bootstrap is not None and target.remote is not None
    from storage_core.adapters.store import RemoteStore
    from storage_core.throttle import limited

    options = RebuildOptions(
        broker_id=target.broker_id,
        parallelism=target.parallelism,
        dry_run=args.dry_run,
        local_retention_ms=args.local_retention_ms,
        local_retention_bytes=args.local_retention_bytes,
        if_empty=args.if_empty,
    )
    limiter = rate_limiter(args)
    if args.if_empty:
        # The quick no-op first: a broker pod restarting on its own data needs neither Kafka nor the tier.
        from storage_core.jobs.rebuild import if_empty_skip

        reasons = [r for d in target.log_dirs if (r := if_empty_skip(Path(d), options)) is not None]
        if reasons:
            skipped = RebuildOutcome("skipped", ", ".join(target.log_dirs), [], reason=reasons[0])
            return _report(args, skipped, started, target.broker_id)
    store = RemoteStore(
        target.remote, {**target.base_options, **storage_options(args)}, retry=retry_policy(args)
    )
    # The command only reads the tier: a missing bucket or root is a mistyped URL, not an empty tier.
    store.require_root()
    with progress_bar(total=None, desc="rebuild", enabled=not args.json) as bar:

        def start(total: int) -> None:
            bar.reset(total=total)

        try:
            outcome = rebuild_log_dirs(
                target.log_dirs,
                store,
                _cluster_view(target, set(args.exclude_topic)),
                options,
                RestoreProgress(advanced=limited(bar.update, limiter), started=start),
            )
        except OSError as exc:
            # The log dir is left as it was or resumable; say which file failed, in one line.
            raise TierkeeperError(f"{exc.filename or target.log_dirs[0]}: {exc.strerror or exc}") from exc
    return _report(args, outcome, started, target.broker_id)


def _cluster_view(target: _Target, excluded: set[str]) -> Any:
    from storage_core.adapters.kafka_admin import KafkaAdmin
    from storage_core.jobs.rebuild import assigned_partitions

    def cluster() -> Any:
        # The broker being rebuilt is down by design; librdkafka would log every refused connection to it.
        assert target.bootstrap is not None
        admin = KafkaAdmin(target.bootstrap, {**target.client_config, "log_level": "2"})
        return assigned_partitions(admin, target.broker_id, excluded)

    return cluster


def _report(args: argparse.Namespace, outcome: Any, started: float, broker_id: int) -> int:
    if args.result_file:
        _write_result(args, outcome)
    restoring = [p for p in outcome.partitions if p.segments]
    if args.json:
        emit_json(
            {
                "action": outcome.action,
                "reason": outcome.reason,
                "log_dir": outcome.log_dir,
                "broker_id": broker_id,
                "partitions": [p.model_dump() for p in outcome.partitions],
                "restored_partitions": len(restoring),
                "planned_bytes": outcome.planned_bytes,
                "downloaded_bytes": outcome.restore.downloaded_bytes,
                "downloaded_files": outcome.restore.downloaded_files,
                "kept_files": outcome.restore.kept_files,
                "expected_tail": sum(p.expected_tail for p in outcome.partitions),
                "seconds": round(time.time() - started, 3),
            }
        )
        return 0
    out = sys.stdout
    if outcome.action == "skipped":
        print(f"skipped: {outcome.reason}", file=out)
        return 0
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
