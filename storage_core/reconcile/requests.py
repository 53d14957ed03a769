"""The work a reconcile round asks for, as typed requests built in one place, and their command lines.

The planner decides *that* a broker's partitions are copied or a topic is cleaned (:class:`CopyAction`,
:class:`CleanupAction`); this module decides *how*: which log dir, which remote tier, which Kafka client
properties, which rate limit, which retention windows and copy interval. Both executors take these
requests: the Kubernetes one turns a request into a Job's arguments (:meth:`args`) and the Job's
``tierkeeper`` command parses them back into the same request (``storage_core.cli``; a test proves the
round trip for every kind), the in-process one (``tierkeeper standalone``) hands it to the same ``jobs``
function the command calls. So the two cannot drift apart: the planner, the Jobs and standalone mode
judge a topic with the same copy interval, copy with the same rate limit, and so on.

Secrets are never in a request: Kafka's secret client properties are a directory the executor provides
(a mounted Secret, ``config_dir``), storage credentials come from the environment.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from storage_core.api.cluster import JobDefaults, KafkaClusterConfig
from storage_core.api.resources import ReplicaFetchers, TieredBrokerSpec, default_table_name
from storage_core.api.trim_hold import TrimHold
from storage_core.reconcile.eligibility import trim_timing
from storage_core.reconcile.planner import CleanupAction, CopyAction
from storage_core.reconcile.tables import TableAction


@dataclass(frozen=True)
class KafkaClient:
    """How a request's command reaches Kafka: the cluster's non-secret ``clientConfig`` and, when it has a
    ``clientConfigSecretRef``, the directory where the executor mounts that Secret."""

    bootstrap_servers: str
    properties: tuple[tuple[str, str], ...] = ()
    config_dir: str | None = None

    def args(self) -> list[str]:
        out: list[str] = []
        for key, value in self.properties:
            out += ["--kafka-property", f"{key}={value}"]
        if self.config_dir is not None:
            out += ["--kafka-config-dir", self.config_dir]
        return out

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> KafkaClient:
        return cls(args.bootstrap_servers, _pairs(args.kafka_property), args.kafka_config_dir)


@dataclass(frozen=True)
class RemoteTier:
    url: str
    storage_options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Non-secret fsspec options (the cluster's ``remote.storageOptions``); credentials are refused there."""

    def args(self) -> list[str]:
        out = ["--remote", self.url]
        for key, value in sorted(self.storage_options.items()):
            # The CLI reads a value as JSON when it parses: a string is quoted too, so "10" stays a string.
            out += ["--storage-option", f"{key}={json.dumps(value, separators=(',', ':'))}"]
        return out

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RemoteTier:
        """Only the request's own flags: the environment and an options file add credentials, which a
        request never holds."""
        options = {key: json.loads(text) for key, text in _pairs(args.storage_option)}
        return cls(args.remote, options)


def _pairs(items: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    """``["k=v", ...]`` -> ``(("k", "v"), ...)``, in the order given (the CLI checks the syntax)."""
    return tuple((key, value) for key, _, value in (item.partition("=") for item in items or ()))


@dataclass(frozen=True)
class SparkTarget:
    """Where a request's Spark work runs: the cluster's ``jobs.sparkMaster`` (None: local mode in the
    command's own process) and ``jobs.sparkConf``, as flags."""

    master: str | None = None
    conf: tuple[tuple[str, str], ...] = ()

    def args(self) -> list[str]:
        """``--spark-master`` (when set) and one ``--spark-conf KEY=VALUE`` per setting."""
        out = ["--spark-master", self.master] if self.master else []
        for key, value in self.conf:
            out += ["--spark-conf", f"{key}={value}"]
        return out

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SparkTarget:
        return cls(args.spark_master, _pairs(args.spark_conf))

    @classmethod
    def of(cls, jobs: JobDefaults) -> SparkTarget:
        return cls(jobs.spark_master or None, tuple(sorted(jobs.spark_conf.items())))


def _broker_dir_args(
    verb: str, log_dirs: Sequence[str], kafka: KafkaClient, broker_id: int, parallelism: int
) -> list[str]:
    """The head the commands working on one broker's log dirs share (one ``--log-dir`` per dir)."""
    return [
        verb,
        *(arg for path in log_dirs for arg in ("--log-dir", path)),
        "--bootstrap-servers",
        kafka.bootstrap_servers,
        "--broker-id",
        str(broker_id),
        "--parallelism",
        str(parallelism),
    ]


@dataclass(frozen=True)
class CopyRequest:
    """Copy exactly these partitions from one broker's log dirs (``tierkeeper copy --assignment``)."""

    log_dirs: tuple[str, ...]
    broker_id: int
    assignment: tuple[tuple[str, tuple[int, ...]], ...]
    """(topic, partitions) in the order the planner listed them."""
    kafka: KafkaClient
    remote: RemoteTier
    parallelism: int = 4
    max_bytes_per_second: int | None = None

    def args(self) -> list[str]:
        out = _broker_dir_args("copy", self.log_dirs, self.kafka, self.broker_id, self.parallelism)
        if self.max_bytes_per_second:
            out += ["--max-bytes-per-second", str(self.max_bytes_per_second)]
        for topic, partitions in self.assignment:
            out += ["--assignment", f"{topic}={','.join(str(p) for p in partitions)}"]
        return out + self.remote.args() + self.kafka.args()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CopyRequest:
        assignment = []
        for item in args.assignment or ():
            topic, _, numbers = item.rpartition("=")
            assignment.append((topic, tuple(int(n) for n in numbers.split(","))))
        return cls(
            log_dirs=tuple(args.log_dir),
            broker_id=args.broker_id,
            assignment=tuple(assignment),
            kafka=KafkaClient.from_args(args),
            remote=RemoteTier.from_args(args),
            parallelism=args.parallelism,
            max_bytes_per_second=args.max_bytes_per_second,
        )


@dataclass(frozen=True)
class CleanupRequest:
    """Remote retention, the orphan sweep and the local trim of one topic (``tierkeeper cleanup``)."""

    topic: str
    kafka: KafkaClient
    remote: RemoteTier
    remote_retention_ms: int
    remote_retention_bytes: int
    local_retention_ms: int
    local_retention_bytes: int
    copy_interval_ms: int
    """The interval the planner judged Kafka's retention with, so the local-trim check agrees with it."""
    engine: str = "local"
    spark: SparkTarget = SparkTarget()
    """Used by the ``spark`` engine only."""
    trim_hold: TrimHold = TrimHold()
    """How direct readers' committed offsets hold the local trim (topic trimHold, else the cluster's)."""

    def args(self) -> list[str]:
        out = [
            "cleanup",
            "--bootstrap-servers",
            self.kafka.bootstrap_servers,
            "--topic",
            self.topic,
            "--remote-retention-ms",
            str(self.remote_retention_ms),
            "--remote-retention-bytes",
            str(self.remote_retention_bytes),
            "--local-retention-ms",
            str(self.local_retention_ms),
            "--local-retention-bytes",
            str(self.local_retention_bytes),
            "--copy-interval-ms",
            str(self.copy_interval_ms),
            *self.remote.args(),
            *trim_hold_args(self.trim_hold),
        ]
        if self.engine != "local":
            out += ["--engine", self.engine, *self.spark.args()]
        return out + self.kafka.args()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CleanupRequest:
        (topic,) = args.topic
        return cls(
            topic=topic,
            kafka=KafkaClient.from_args(args),
            remote=RemoteTier.from_args(args),
            remote_retention_ms=args.remote_retention_ms,
            remote_retention_bytes=args.remote_retention_bytes,
            local_retention_ms=args.local_retention_ms,
            local_retention_bytes=args.local_retention_bytes,
            copy_interval_ms=args.copy_interval_ms,
            engine=args.engine,
            spark=SparkTarget.from_args(args),
            trim_hold=trim_hold_from_args(args),
        )


def trim_hold_args(hold: TrimHold) -> list[str]:
    """``tierkeeper cleanup``'s flags for ``hold``, every setting spelled out (the Job shows what it ran)."""
    if not hold.enabled:
        return ["--no-trim-hold"]
    out = [
        "--trim-hold-max-age-ms",
        str(hold.max_age_ms),
        "--trim-hold-max-bytes",
        str(hold.max_bytes),
        "--trim-hold-inactive-group-ms",
        str(hold.inactive_group_ms),
    ]
    for group in hold.ignore_groups:
        out += ["--trim-hold-ignore-group", group]
    return out


def trim_hold_from_args(args: argparse.Namespace) -> TrimHold:
    """The :class:`TrimHold` ``tierkeeper cleanup``'s flags ask for (absent flags: the model's defaults)."""
    given = {
        "enabled": not args.no_trim_hold,
        "max_age_ms": args.trim_hold_max_age_ms,
        "max_bytes": args.trim_hold_max_bytes,
        "inactive_group_ms": args.trim_hold_inactive_group_ms,
        "ignore_groups": args.trim_hold_ignore_group,
    }
    return TrimHold(**{k: v for k, v in given.items() if v is not None})


@dataclass(frozen=True)
class DeleteRequest:
    """Delete one topic incarnation's remote tier (deletionPolicy Delete); a tier already gone is fine."""

    topic: str
    topic_id: str
    remote: RemoteTier

    def args(self) -> list[str]:
        return ["cleanup", "--delete-topic", self.topic, "--topic-id", self.topic_id, "--missing-ok"] + (
            self.remote.args()
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DeleteRequest:
        return cls(args.delete_topic, args.topic_id, RemoteTier.from_args(args))


@dataclass(frozen=True)
class RebuildRequest:
    """Restore a replaced broker's empty log dirs from the remote tier (``tierkeeper rebuild``)."""

    log_dirs: tuple[str, ...]
    broker_id: int
    kafka: KafkaClient
    remote: RemoteTier
    parallelism: int = 4

    def args(self) -> list[str]:
        head = _broker_dir_args("rebuild", self.log_dirs, self.kafka, self.broker_id, self.parallelism)
        return [*head, *self.remote.args(), *self.kafka.args()]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RebuildRequest:
        return cls(
            log_dirs=tuple(args.log_dir),
            broker_id=args.broker_id,
            kafka=KafkaClient.from_args(args),
            remote=RemoteTier.from_args(args),
            parallelism=args.parallelism,
        )


@dataclass(frozen=True)
class CheckRemoteRequest:
    """Check that a cluster's remote tier is reachable with the credentials the Jobs get
    (``tierkeeper check-remote``: bucket there, a probe object written and deleted)."""

    remote: RemoteTier

    def args(self) -> list[str]:
        return ["check-remote", *self.remote.args()]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CheckRemoteRequest:
        return cls(remote=RemoteTier.from_args(args))


@dataclass(frozen=True)
class FetcherStepRequest:
    """Set one broker's ``num.replica.fetchers`` override to one step of a planned change and wait until
    the broker reports it (``tierkeeper fetchers apply --broker --target``)."""

    broker_id: int
    value: int
    kafka: KafkaClient
    timeout_seconds: float
    """How long the broker has to report the step (``spec.replicaFetchers.stepTimeoutSeconds``)."""

    def args(self) -> list[str]:
        return [
            "fetchers",
            "apply",
            "--bootstrap-servers",
            self.kafka.bootstrap_servers,
            "--broker",
            str(self.broker_id),
            "--target",
            str(self.value),
            "--timeout",
            repr(float(self.timeout_seconds)),
            *self.kafka.args(),
        ]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> FetcherStepRequest:
        return cls(args.broker, args.target, KafkaClient.from_args(args), args.timeout)


@dataclass(frozen=True)
class TableTarget:
    """Where a topic's Iceberg table is and which catalog commits it (``spec.table``), as flags."""

    location: str
    name: str | None = None
    catalog: str | None = None
    catalog_properties: tuple[tuple[str, str], ...] = ()

    def args(self) -> list[str]:
        out = ["--to", self.location]
        if self.name:
            out += ["--table", self.name]
        if self.catalog:
            out += ["--catalog", self.catalog]
        for key, value in self.catalog_properties:
            out += ["--catalog-property", f"{key}={value}"]
        return out

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TableTarget:
        return cls(args.to, args.table, args.catalog, _pairs(args.catalog_property))


@dataclass(frozen=True)
class ExportRequest:
    """Append what the tier holds and the table lacks to the topic's Iceberg table, in one snapshot
    (``tierkeeper export --format iceberg``)."""

    topic: str
    remote: RemoteTier
    table: TableTarget
    isolation: str = "read_committed"
    spark: SparkTarget = SparkTarget()
    value_format: str | None = None
    schema_registry: str | None = None

    def args(self) -> list[str]:
        out = ["export", "--format", "iceberg", "--topic", self.topic, *self.table.args()]
        out += ["--isolation", self.isolation, *self.remote.args()]
        if self.value_format:
            out += ["--value-format", self.value_format]
        if self.schema_registry:
            out += ["--schema-registry", self.schema_registry]
        return out + self.spark.args()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExportRequest:
        return cls(
            topic=args.topic,
            remote=RemoteTier.from_args(args),
            table=TableTarget.from_args(args),
            isolation=args.isolation,
            spark=SparkTarget.from_args(args),
            value_format=args.value_format,
            schema_registry=args.schema_registry,
        )


@dataclass(frozen=True)
class MaintenancePolicy:
    """What a table-maintenance run keeps and compacts (``spec.table.maintenance``, ages in milliseconds).
    Each field is a flag of ``tierkeeper table-maintenance`` of the same name (``--keep-snapshots`` ...)."""

    keep_snapshots: int
    snapshot_max_age_ms: int
    orphan_min_age_ms: int
    compact_min_files: int

    def args(self) -> list[str]:
        out = []
        for f in fields(MaintenancePolicy):
            out += [f"--{f.name.replace('_', '-')}", str(getattr(self, f.name))]
        return out

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MaintenancePolicy:
        return cls(**{f.name: getattr(args, f.name) for f in fields(MaintenancePolicy)})


@dataclass(frozen=True)
class TableMaintenanceRequest:
    """Expire old snapshots, delete orphan files and compact small ones in the topic's Iceberg table
    (``tierkeeper table-maintenance``)."""

    remote: RemoteTier
    """The cluster's tier: the table is written with its storage options when the scheme is the same."""
    table: TableTarget
    policy: MaintenancePolicy

    def args(self) -> list[str]:
        return ["table-maintenance", *self.table.args(), *self.policy.args(), *self.remote.args()]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TableMaintenanceRequest:
        return cls(RemoteTier.from_args(args), TableTarget.from_args(args), MaintenancePolicy.from_args(args))


Request = (
    CopyRequest
    | CleanupRequest
    | DeleteRequest
    | RebuildRequest
    | FetcherStepRequest
    | CheckRemoteRequest
    | ExportRequest
    | TableMaintenanceRequest
)
"""Every kind of work a round hands to an executor."""


def request_from_args(args: argparse.Namespace) -> Request:
    """The request a ``tierkeeper`` command line made by :meth:`args` stands for (``args``: the parsed
    command line): the inverse of ``args()``, which a test proves for every kind."""
    if args.command == "copy":
        return CopyRequest.from_args(args)
    if args.command == "cleanup":
        return DeleteRequest.from_args(args) if args.delete_topic else CleanupRequest.from_args(args)
    if args.command == "rebuild":
        return RebuildRequest.from_args(args)
    if args.command == "fetchers" and args.fetchers_command == "apply":
        return FetcherStepRequest.from_args(args)
    if args.command == "check-remote":
        return CheckRemoteRequest.from_args(args)
    if args.command == "export" and args.format == "iceberg":
        return ExportRequest.from_args(args)
    if args.command == "table-maintenance":
        return TableMaintenanceRequest.from_args(args)
    raise ValueError(f"tierkeeper {args.command} is no request's command")


def kafka_client(cluster: KafkaClusterConfig, config_dir: str | None) -> KafkaClient:
    """``config_dir``: where the executor mounts the cluster's ``clientConfigSecretRef`` (ignored, and
    None in the request, when the cluster has none)."""
    return KafkaClient(
        cluster.bootstrap_servers,
        tuple(sorted(cluster.client_config.items())),
        config_dir if cluster.client_config_secret_ref is not None else None,
    )


def remote_tier(cluster: KafkaClusterConfig) -> RemoteTier:
    return RemoteTier(cluster.remote.url, dict(cluster.remote.storage_options))


def copy_request(
    action: CopyAction,
    cluster: KafkaClusterConfig,
    broker: TieredBrokerSpec,
    *,
    config_dir: str | None,
) -> CopyRequest:
    return CopyRequest(
        log_dirs=tuple(d.path for d in broker.log_dirs()),
        broker_id=action.broker_id,
        assignment=tuple((w.topic, tuple(w.partitions)) for w in action.work),
        kafka=kafka_client(cluster, config_dir),
        remote=remote_tier(cluster),
        parallelism=cluster.jobs.copy_parallelism,
        max_bytes_per_second=cluster.jobs.max_bytes_per_second or None,
    )


def cleanup_request(
    action: CleanupAction, cluster: KafkaClusterConfig, *, config_dir: str | None
) -> CleanupRequest:
    spec, jobs = action.spec, cluster.jobs
    return CleanupRequest(
        topic=action.topic,
        kafka=kafka_client(cluster, config_dir),
        remote=remote_tier(cluster),
        remote_retention_ms=spec.remote_retention_ms,
        remote_retention_bytes=spec.remote_retention_bytes,
        local_retention_ms=spec.local_retention_ms,
        local_retention_bytes=spec.local_retention_bytes,
        copy_interval_ms=trim_timing(spec).copy_interval_ms,
        engine=jobs.cleanup_engine,
        spark=SparkTarget.of(jobs) if jobs.cleanup_engine == "spark" else SparkTarget(),
        trim_hold=spec.trim_hold if spec.trim_hold is not None else cluster.trim_hold,
    )


def delete_request(topic: str, topic_id: str, cluster: KafkaClusterConfig) -> DeleteRequest:
    return DeleteRequest(topic, topic_id, remote_tier(cluster))


def check_remote_request(cluster: KafkaClusterConfig) -> CheckRemoteRequest:
    return CheckRemoteRequest(remote_tier(cluster))


def rebuild_request(
    broker: TieredBrokerSpec, cluster: KafkaClusterConfig, *, config_dir: str | None
) -> RebuildRequest:
    return RebuildRequest(
        log_dirs=tuple(d.path for d in broker.log_dirs()),
        broker_id=broker.broker_id,
        kafka=kafka_client(cluster, config_dir),
        remote=remote_tier(cluster),
        parallelism=broker.rebuild.parallelism,
    )


def fetcher_step_request(
    cluster: KafkaClusterConfig,
    broker_id: int,
    value: int,
    spec: ReplicaFetchers,
    *,
    config_dir: str | None,
) -> FetcherStepRequest:
    return FetcherStepRequest(
        broker_id=broker_id,
        value=value,
        kafka=kafka_client(cluster, config_dir),
        timeout_seconds=float(spec.step_timeout_seconds),
    )


def table_target(action: TableAction) -> TableTarget:
    table, catalog = action.table, action.table.catalog
    return TableTarget(
        location=table.location,
        name=table.name or default_table_name(action.topic),
        catalog=catalog.name if catalog is not None else None,
        catalog_properties=tuple(sorted(catalog.properties.items())) if catalog is not None else (),
    )


def table_request(
    action: TableAction, cluster: KafkaClusterConfig
) -> ExportRequest | TableMaintenanceRequest:
    """The export (Spark engine: the cluster's jobs.sparkMaster and sparkConf) or the maintenance run."""
    if action.kind == "export":
        jobs, decoding = cluster.jobs, action.table.value_decoding
        return ExportRequest(
            topic=action.topic,
            remote=remote_tier(cluster),
            table=table_target(action),
            isolation=action.table.isolation,
            spark=SparkTarget.of(jobs),
            value_format=decoding.format if decoding is not None else None,
            schema_registry=decoding.schema_registry_url if decoding is not None else None,
        )
    maintenance = action.table.maintenance
    return TableMaintenanceRequest(
        remote=remote_tier(cluster),
        table=table_target(action),
        policy=MaintenancePolicy(
            keep_snapshots=maintenance.keep_snapshots,
            snapshot_max_age_ms=maintenance.snapshot_max_age_seconds * 1000,
            orphan_min_age_ms=maintenance.orphan_min_age_seconds * 1000,
            compact_min_files=maintenance.compact_min_files,
        ),
    )
