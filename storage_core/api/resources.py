"""The TieredTopic and TieredBroker custom resources: spec and status models.

These models are the single source of the resources' shape: the CRDs are generated from them (the
operator's ``crdgen``), the operator parses every object with them, and ``tierkeeper standalone`` reads
its manifests with them. Field descriptions become what ``kubectl explain`` shows, so they are written
for the person editing the YAML. Cross-field rules are declared once in ``RULES`` (CEL + Python).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, ClassVar, Literal

from pydantic import Field
from pydantic.alias_generators import to_camel

from storage_core.api.cluster import SecretRef, env_secret_ref, without_credentials
from storage_core.api.fields import (
    INFINITE,
    AbsolutePath,
    CronExpression,
    Int32Id,
    ObjectName,
    RemoteUrl,
    RetentionBytes,
    RetentionMs,
    RoundInterval,
    TableIdentifier,
    ThreadCount,
    TopicName,
)
from storage_core.api.rules import ApiModel, Rule, cel_or_default
from storage_core.api.trim_hold import DEFAULT_MAX_AGE_MS, TrimHold

DEFAULT_COPY_INTERVAL_S = 300
DEFAULT_CLEANUP_INTERVAL_S = 300
DEFAULT_LOCAL_RETENTION_MS = 86_400_000
DEFAULT_FETCHERS_MIN = 1
DEFAULT_FETCHERS_MAX = 8
DEFAULT_FETCHERS_REPLAN_S = 300
DEFAULT_FETCHERS_STEP_TIMEOUT_S = 120
DEFAULT_MOUNT_PATH = "/var/lib/kafka/data"
MAX_EXTRA_LOG_DIRS = 15
"""Bounds the CEL rules' cost; more volumes than Strimzi lets a broker have in practice."""
DEFAULT_EXPORT_INTERVAL_S = 3600
DEFAULT_MAINTENANCE_INTERVAL_S = 86_400
DEFAULT_KEEP_SNAPSHOTS = 10
DEFAULT_SNAPSHOT_MAX_AGE_S = 7 * 86_400
DEFAULT_ORPHAN_MIN_AGE_S = 3 * 86_400
DEFAULT_COMPACT_MIN_FILES = 8


class ClusterRef(ApiModel):
    """A Kafka cluster defined in the operator's cluster configuration."""

    name: ObjectName = Field(description="Name of the cluster in the cluster configuration.")


class ClusterMemberSpec(ApiModel):
    """What TieredTopic and TieredBroker share: the cluster they belong to and the pause switch."""

    cluster_ref: ClusterRef = Field(description="The Kafka cluster (from the cluster configuration).")
    paused: bool = Field(default=False, description="Take no action for this object until set back to false.")


def _local_within_remote(local_attr: str, remote_attr: str, local_default: int) -> Rule:
    local_name, remote_name = to_camel(local_attr), to_camel(remote_attr)
    local_cel = cel_or_default(local_name, local_default)
    remote_cel = cel_or_default(remote_name, INFINITE)

    def check(spec: ApiModel) -> bool:
        local, remote = getattr(spec, local_attr), getattr(spec, remote_attr)
        return bool(remote == INFINITE or (local != INFINITE and local <= remote))

    return Rule(
        cel=f"{remote_cel} == -1 || ({local_cel} != -1 && {local_cel} <= {remote_cel})",
        message=f"{local_name} must not exceed {remote_name} (-1 means infinite; an infinite local "
        "retention needs an infinite remote retention)",
        check=check,
    )


class CopyPolicy(ApiModel):
    """When rolled segments are copied to the remote tier."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="!(has(self.schedule) && has(self.intervalSeconds))",
            message="copy.schedule and copy.intervalSeconds are mutually exclusive; set one",
            check=lambda p: not (p.schedule is not None and "interval_seconds" in p.model_fields_set),
        ),
    )

    interval_seconds: RoundInterval = Field(
        default=DEFAULT_COPY_INTERVAL_S,
        description="Seconds between copy rounds. Mutually exclusive with schedule.",
    )
    schedule: CronExpression | None = Field(
        default=None,
        max_length=100,
        description="Cron expression (5 fields, or @hourly/@daily/...) for copy rounds, in UTC. "
        "Mutually exclusive with intervalSeconds.",
    )


class CleanupPolicy(ApiModel):
    """When remote retention, the orphan sweep and the local trim run for the topic."""

    interval_seconds: RoundInterval = Field(
        default=DEFAULT_CLEANUP_INTERVAL_S, description="Seconds between cleanup runs."
    )


def default_table_name(topic: str) -> str:
    """``tierkeeper.<topic>`` with the characters catalogs refuse in a name made ``_`` (spec.table.name's
    default, and ``tierkeeper export --table``'s)."""
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in topic)
    return f"tierkeeper.{safe}"


CatalogProperties = Annotated[dict[str, str], without_credentials("catalog properties", "secretRef")]


class TableCatalog(ApiModel):
    """A catalog the export commits through (REST, Hive Metastore, AWS Glue, SQL), configured for
    pyiceberg."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[A-Za-z0-9_]+$",
        description="The catalog's pyiceberg name: its settings are the environment variables "
        "PYICEBERG_CATALOG__<NAME>__<KEY> (from secretRef) and properties.",
    )
    properties: CatalogProperties = Field(
        default_factory=dict,
        description="Non-secret catalog properties (type, uri, warehouse, ...); credentials are refused "
        "here: put them in secretRef.",
    )
    secret_ref: SecretRef | None = env_secret_ref(
        "the export and maintenance Jobs, e.g. PYICEBERG_CATALOG__LAKE__CREDENTIAL."
    )


class TableMaintenance(ApiModel):
    """Snapshot expiry, orphan-file removal and compaction of the table, on an interval
    (``tierkeeper table-maintenance``)."""

    enabled: bool = Field(default=True, description="Run maintenance Jobs for the table.")
    interval_seconds: int = Field(
        default=DEFAULT_MAINTENANCE_INTERVAL_S, ge=300, le=2_592_000, description="Seconds between runs."
    )
    keep_snapshots: int = Field(
        default=DEFAULT_KEEP_SNAPSHOTS,
        ge=1,
        le=10_000,
        description="The newest snapshots always kept, whatever their age (the current one always is).",
    )
    snapshot_max_age_seconds: int = Field(
        default=DEFAULT_SNAPSHOT_MAX_AGE_S,
        ge=0,
        description="Snapshots older than this (and not among the newest keepSnapshots) are expired: time "
        "travel reaches back this far.",
    )
    orphan_min_age_seconds: int = Field(
        default=DEFAULT_ORPHAN_MIN_AGE_S,
        ge=3600,
        description="A file no snapshot references (or a metadata file past the table's "
        "write.metadata.previous-versions-max) is deleted only once older than this: it must exceed the "
        "longest export run (a running export's files are referenced only when it commits).",
    )
    compact_min_files: int = Field(
        default=DEFAULT_COMPACT_MIN_FILES,
        ge=0,
        le=10_000,
        description="Rewrite a table partition (day and Kafka partition) into one file once it holds this "
        "many data files; 0 turns compaction off.",
    )


class TableValueDecoding(ApiModel):
    """Decode the topic's values into typed columns of the table (``value_decoded``, widened as new
    fields appear); a value that cannot be decoded keeps its reason in ``value_error``."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="(self.format == 'avro') == has(self.schemaRegistryUrl)",
            message="table.valueDecoding.schemaRegistryUrl is set for format avro only",
            check=lambda v: (v.format == "avro") == (v.schema_registry_url is not None),
        ),
    )

    format: Literal["json", "avro"] = Field(
        description="json: each value is a JSON object. avro: Confluent's wire format (magic byte 0, schema "
        "id), schemas from schemaRegistryUrl."
    )
    schema_registry_url: str | None = Field(
        default=None,
        max_length=2048,
        pattern=r"^https?://[^\s@]+$",
        description="The schema registry's REST API (Confluent Schema Registry, Karapace, Apicurio's "
        "/apis/ccompat/v7); no credentials in it.",
    )
    secret_ref: SecretRef | None = env_secret_ref(
        "the export Jobs, e.g. SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO (user:password)."
    )


class TableSpec(ApiModel):
    """Keep an Apache Iceberg table of the topic's tiered history current (``tierkeeper export --format
    iceberg``, run by the operator or standalone mode)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel=f"{cel_or_default('trigger', 'AfterCopy')} == 'Interval' || !has(self.intervalSeconds)",
            message="table.intervalSeconds applies to trigger Interval only",
            check=lambda t: t.trigger == "Interval" or "interval_seconds" not in t.model_fields_set,
        ),
    )

    format: Literal["iceberg"] = Field(default="iceberg", description="Table format (iceberg).")
    location: RemoteUrl = Field(
        description="The table's directory (file://, s3://, ...): data and metadata files go there, written "
        "with the cluster's remote storage options when the scheme is the remote tier's."
    )
    name: TableIdentifier | None = Field(
        default=None,
        description="Table name NAMESPACE.NAME in the catalog (default tierkeeper.<topic>).",
    )
    catalog: TableCatalog | None = Field(
        default=None,
        description="A configured catalog; omit for the embedded one (the table directory: nothing to run).",
    )
    trigger: Literal["AfterCopy", "Interval"] = Field(
        default="AfterCopy",
        description="AfterCopy: export once a copy round has tiered records the table lacks. Interval: "
        "export every intervalSeconds when it lacks any.",
    )
    interval_seconds: int = Field(
        default=DEFAULT_EXPORT_INTERVAL_S,
        ge=60,
        le=604_800,
        description="Seconds between exports (trigger Interval only).",
    )
    isolation: Literal["read_committed", "read_uncommitted"] = Field(
        default="read_committed",
        description="read_committed leaves out aborted transactions, as a read_committed consumer does.",
    )
    maintenance: TableMaintenance = Field(
        default_factory=TableMaintenance, description="Snapshot expiry, orphan removal, compaction."
    )
    value_decoding: TableValueDecoding | None = Field(
        default=None, description="Decode values into typed columns; omit to keep value binary only."
    )


def _hold_outlasts_window() -> Rule:
    """trimHold.maxAgeMs must exceed the local window's age: the window keeps everything younger already,
    so a shorter bound could never hold a record (only the topic's own trimHold is checked here; the
    cluster default meets topics of every window)."""
    enabled = cel_or_default("trimHold.enabled", True)
    age = cel_or_default("trimHold.maxAgeMs", DEFAULT_MAX_AGE_MS)
    local = cel_or_default("localRetentionMs", DEFAULT_LOCAL_RETENTION_MS)

    def check(spec: TieredTopicSpec) -> bool:
        hold, local_ms = spec.trim_hold, spec.local_retention_ms
        if hold is None or not hold.enabled or INFINITE in (hold.max_age_ms, local_ms):
            return True
        return hold.max_age_ms > local_ms

    return Rule(
        cel=f"!has(self.trimHold) || !{enabled} || {age} == -1 || {local} == -1 || {age} > {local}",
        message="trimHold.maxAgeMs must exceed localRetentionMs (-1 means no bound): the local window "
        "keeps everything younger already, so a shorter bound holds nothing",
        check=check,
    )


class TieredTopicSpec(ClusterMemberSpec):
    """Desired tiering of one Kafka topic."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        _local_within_remote("local_retention_ms", "remote_retention_ms", DEFAULT_LOCAL_RETENTION_MS),
        _local_within_remote("local_retention_bytes", "remote_retention_bytes", INFINITE),
        _hold_outlasts_window(),
    )

    topic: TopicName = Field(description="Name of the Kafka topic to tier.")
    local_retention_ms: RetentionMs = Field(
        default=DEFAULT_LOCAL_RETENTION_MS,
        description="How long a segment stays on the brokers' disks once it is in the remote tier, "
        "in milliseconds; -1 keeps it forever. Must not exceed remoteRetentionMs.",
    )
    local_retention_bytes: RetentionBytes = Field(
        default=INFINITE,
        description="Per-partition bytes kept on the brokers' disks once tiered; -1 means no limit. "
        "Must not exceed remoteRetentionBytes.",
    )
    remote_retention_ms: RetentionMs = Field(
        default=INFINITE,
        description="How long a segment is kept in the remote tier, in milliseconds; -1 keeps it forever.",
    )
    remote_retention_bytes: RetentionBytes = Field(
        default=INFINITE, description="Per-partition bytes kept in the remote tier; -1 means no limit."
    )
    trim_hold: TrimHold | None = Field(
        default=None,
        description="How consumer groups that read the brokers directly (not through a gateway) hold this "
        "topic's local trim at their committed offsets; omit to use the cluster's trimHold.",
    )
    copy_policy: CopyPolicy = Field(
        default_factory=CopyPolicy, alias="copy", description="When rolled segments are copied."
    )
    cleanup: CleanupPolicy = Field(
        default_factory=CleanupPolicy, description="When retention and the local trim run."
    )
    deletion_policy: Literal["Retain", "Delete"] = Field(
        default="Retain",
        description="What deleting this object does to the topic's remote tier: Retain keeps it, Delete "
        "removes it (crash-safe, through the storage core).",
    )
    table: TableSpec | None = Field(
        default=None,
        description="Keep an Apache Iceberg table of the topic's tiered records current (export Jobs after "
        "copies or on an interval, and table maintenance). The table is never deleted with this object.",
    )


class LogDirLocation(ApiModel):
    """Where the broker's log directory is: on a PersistentVolumeClaim on Kubernetes, a local path in
    standalone mode."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="!has(self.claimName) || "
            f"self.path.startsWith({cel_or_default('mountPath', DEFAULT_MOUNT_PATH)})",
            message="logDir.path must lie under logDir.mountPath when logDir.claimName is set",
            check=lambda d: d.claim_name is None or d.path.startswith(d.mount_path),
        ),
    )

    path: AbsolutePath = Field(
        description="Absolute path of the log directory (one entry of the broker's log.dirs) as Jobs see "
        "it: under mountPath on Kubernetes, a local path in standalone mode."
    )
    claim_name: ObjectName | None = Field(
        default=None,
        description="PersistentVolumeClaim holding the log directory, in this namespace; Jobs mount it "
        "read-only at mountPath. Required on Kubernetes; standalone mode reads path directly.",
    )
    sub_path: str | None = Field(
        default=None, max_length=1024, description="Sub-path of the volume to mount at mountPath."
    )
    mount_path: AbsolutePath = Field(
        default=DEFAULT_MOUNT_PATH, description="Where Jobs mount the claim (read-only)."
    )


class BrokerPlacement(ApiModel):
    """Which pod (and so which node) runs the broker: copy Jobs run on that node."""

    pod_name: ObjectName | None = Field(
        default=None, description="The broker's pod, in this namespace; its node is looked up."
    )
    node_name: str | None = Field(
        default=None, max_length=253, description="The node, when it is fixed (overrides podName)."
    )


class RebuildPolicy(ApiModel):
    """Whether and how a broker's log directory is rebuilt from the remote tier."""

    policy: Literal["Never", "WhenLogDirEmpty"] = Field(
        default="Never",
        description="Never: the broker re-replicates from its peers as usual. WhenLogDirEmpty: when the "
        "log directory holds no partition directories, restore tiered segments into it before the "
        "broker catches up.",
    )
    parallelism: ThreadCount = Field(default=4, description="Partitions restored at the same time.")
    run_as_user: Int32Id | None = Field(
        default=None,
        description="User a requested rebuild Job runs as: the broker's own (it writes into the broker's "
        "log directory; Strimzi's is 1001). Omit to run as the image's user.",
    )
    run_as_group: Int32Id | None = Field(
        default=None,
        description="Group a requested rebuild Job runs as (Strimzi: 0). Omit for the image's group.",
    )
    request_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        description="Ask for one rebuild Job from Git: set a new value (a date, a ticket). Once the operator "
        "has acted on it, status.requests.rebuild holds it, so re-applying the same manifest never rebuilds "
        "again. kubectl users can annotate tierkeeper.io/rebuild=run instead.",
    )


class FetcherRequest(ApiModel):
    """A one-shot fetcher command kept in Git: acted on once per id (status.requests.fetchers)."""

    id: str = Field(
        min_length=1, max_length=63, description="A new value asks again; the same one is never repeated."
    )
    command: Literal["approve", "refresh", "stop"] = Field(
        description="What the annotation tierkeeper.io/fetchers would say: approve the proposal, plan again, "
        "or stop a change."
    )


class ReplicaFetchers(ApiModel):
    """How num.replica.fetchers is chosen for the broker."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="(has(self.mode) ? self.mode : 'auto') != 'fixed' || has(self.value)",
            message="replicaFetchers.value is required when mode is fixed",
            check=lambda f: f.mode != "fixed" or f.value is not None,
        ),
        Rule(
            cel="(has(self.mode) ? self.mode : 'auto') != 'fixed' || !(has(self.min) || has(self.max))",
            message="replicaFetchers.min/max apply to mode auto only; remove them in fixed mode",
            check=lambda f: f.mode != "fixed" or not (f.model_fields_set & {"minimum", "maximum"}),
        ),
        Rule(
            cel="(has(self.mode) ? self.mode : 'auto') != 'auto' || !has(self.value)",
            message="replicaFetchers.value applies to mode fixed only; use min/max with auto",
            check=lambda f: f.mode != "auto" or f.value is None,
        ),
        Rule(
            cel=f"{cel_or_default('min', DEFAULT_FETCHERS_MIN)} <= "
            f"{cel_or_default('max', DEFAULT_FETCHERS_MAX)}",
            message="replicaFetchers.min must not exceed replicaFetchers.max",
            check=lambda f: f.minimum <= f.maximum,
        ),
        Rule(
            cel="(has(self.mode) ? self.mode : 'auto') != 'fixed' || !(has(self.autoApprove) && "
            "self.autoApprove)",
            message="replicaFetchers.autoApprove applies to mode auto only (fixed needs no approval)",
            check=lambda f: f.mode != "fixed" or not f.auto_approve,
        ),
    )

    mode: Literal["auto", "fixed"] = Field(
        default="auto",
        description="auto: pick a fetcher count in [min, max] that spreads the followed partitions evenly "
        "across fetcher threads. fixed: always use value.",
    )
    minimum: ThreadCount = Field(
        default=DEFAULT_FETCHERS_MIN, alias="min", description="Lowest count auto may pick."
    )
    maximum: ThreadCount = Field(
        default=DEFAULT_FETCHERS_MAX, alias="max", description="Highest count auto may pick."
    )
    value: ThreadCount | None = Field(default=None, description="The count used in fixed mode.")
    auto_approve: bool = Field(
        default=False,
        description="auto only: apply each proposal without waiting for tierkeeper.io/fetchers=approve.",
    )
    replan_interval_seconds: int = Field(
        default=DEFAULT_FETCHERS_REPLAN_S,
        ge=10,
        le=86400,
        description="auto only: after the replica assignment changes (topics created, reassignments, "
        "leader changes, brokers added or removed), plan again at most this often.",
    )
    step_timeout_seconds: int = Field(
        default=DEFAULT_FETCHERS_STEP_TIMEOUT_S,
        ge=5,
        le=3600,
        description="How long the broker may take to report a new value in effect (DescribeConfigs) "
        "before the change counts as failed.",
    )
    request: FetcherRequest | None = Field(
        default=None,
        description="A command from Git (GitOps re-applies it harmlessly: acted on once per id). kubectl "
        "users can annotate tierkeeper.io/fetchers=approve|refresh|stop instead.",
    )


def _mount_cel(location: str) -> str:
    return f"(has({location}.mountPath) ? {location}.mountPath : {json.dumps(DEFAULT_MOUNT_PATH)})"


def _distinct(values: Sequence[str]) -> bool:
    return len(set(values)) == len(values)


class TieredBrokerSpec(ClusterMemberSpec):
    """One Kafka broker whose log directories Tierkeeper reads (copies) and looks after."""

    # The rules compare each extra dir with logDir only: pairwise CEL over the list costs more than the API
    # server allows. Extra dirs among themselves: their paths are the list's map keys (the API server
    # keeps them unique); the model checks all pairs, so clashing mount paths among extra dirs the API
    # server let through are the operator's InvalidSpec line.
    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="!has(self.extraLogDirs) || self.extraLogDirs.all(d, d.path != self.logDir.path)",
            message="logDir.path and every extraLogDirs[].path must differ",
            check=lambda b: _distinct([d.path for d in b.log_dirs()]),
        ),
        Rule(
            cel="!has(self.extraLogDirs) || self.extraLogDirs.all(d, has(d.claimName) == "
            "has(self.logDir.claimName))",
            message="extraLogDirs[].claimName must be set exactly when logDir.claimName is",
            check=lambda b: all(
                (d.claim_name is None) == (b.log_dir.claim_name is None) for d in b.log_dirs()
            ),
        ),
        Rule(
            cel="!has(self.extraLogDirs) || !has(self.logDir.claimName) || self.extraLogDirs.all(d, "
            f"{_mount_cel('d')} != {_mount_cel('self.logDir')})",
            message="every log dir's claim needs a mountPath of its own (logDir.mountPath and "
            "extraLogDirs[].mountPath must differ)",
            check=lambda b: b.log_dir.claim_name is None or _distinct([d.mount_path for d in b.log_dirs()]),
        ),
    )

    broker_id: Int32Id = Field(description="The broker's node.id.")
    log_dir: LogDirLocation = Field(description="Where the broker's (first) log directory is.")
    extra_log_dirs: list[LogDirLocation] = Field(
        default_factory=list,
        max_length=MAX_EXTRA_LOG_DIRS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["path"]},
        description="The broker's other log directories (JBOD: one per further entry of log.dirs, each "
        "usually on a claim of its own). Copies read each partition from the directory holding it; "
        "rebuilds spread partitions over all of them.",
    )
    placement: BrokerPlacement = Field(
        default_factory=BrokerPlacement, description="Which pod/node runs the broker (Kubernetes)."
    )
    rebuild: RebuildPolicy = Field(default_factory=RebuildPolicy, description="Rebuild from the remote tier.")
    replica_fetchers: ReplicaFetchers | None = Field(
        default=None,
        description="Management of num.replica.fetchers; omit to leave the broker's setting alone.",
    )

    def log_dirs(self) -> list[LogDirLocation]:
        """Every log dir of the broker, ``logDir`` first."""
        return [self.log_dir, *self.extra_log_dirs]

    def claims(self) -> list[str]:
        """The claims of the broker's log dirs (none in standalone mode), each once."""
        return list(dict.fromkeys(d.claim_name for d in self.log_dirs() if d.claim_name is not None))
