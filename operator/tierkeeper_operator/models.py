"""Pydantic models of the TieredTopic and TieredBroker custom resources (tierkeeper.io/v1alpha1).

These models are the single source of the resources' shape: the CRDs in ``crds/`` are generated
from them (``python -m tierkeeper_operator.crdgen``) and the operator parses every ``spec`` with
them. Field descriptions become the CRD documentation that ``kubectl explain`` shows, so they are
written for the person editing the YAML.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

INFINITE = -1
"""Retention value meaning "keep forever", as in Kafka's retention.ms / retention.bytes."""

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
_HOST_PORT = re.compile(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})")
_CRON_FIELD = re.compile(r"[0-9A-Za-z*/,?-]+")
_CRON_MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@hourly"})


def _check_retention(value: int) -> int:
    if value < INFINITE:
        raise ValueError(f"must be -1 (infinite) or >= 0, got {value}")
    return value


def _check_topic(value: str) -> str:
    if not _TOPIC_NAME.fullmatch(value) or value in {".", ".."}:
        raise ValueError(
            f"{value!r} is not a legal Kafka topic name "
            "(1-249 characters from a-z A-Z 0-9 . _ -, not '.' or '..')"
        )
    return value


def _check_k8s_name(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid Kubernetes object name (lower-case DNS subdomain)")
    return value


def _check_url(value: str) -> str:
    if not _URL.fullmatch(value):
        raise ValueError(f"{value!r} is not a URL with a scheme, e.g. s3://bucket/prefix")
    return value


def _check_bootstrap(value: str) -> str:
    entries = [entry.strip() for entry in value.split(",")]
    for entry in entries:
        match = _HOST_PORT.fullmatch(entry)
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise ValueError(f"{entry!r} is not host:port (a comma-separated list of host:port is expected)")
    return ",".join(entries)


def _check_absolute_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path")
    return value


def _check_cron(value: str) -> str:
    if value in _CRON_MACROS:
        return value
    fields = value.split()
    if len(fields) != 5 or not all(_CRON_FIELD.fullmatch(field) for field in fields):
        raise ValueError(f"{value!r} is not a 5-field cron expression (minute hour day month weekday)")
    return value


RetentionMs = Annotated[int, Field(json_schema_extra={"minimum": -1}), AfterValidator(_check_retention)]
RetentionBytes = Annotated[int, Field(json_schema_extra={"minimum": -1}), AfterValidator(_check_retention)]
TopicName = Annotated[str, Field(min_length=1, max_length=249), AfterValidator(_check_topic)]
ObjectName = Annotated[str, Field(min_length=1, max_length=253), AfterValidator(_check_k8s_name)]
RemoteUrl = Annotated[str, Field(min_length=4), AfterValidator(_check_url)]
BootstrapServers = Annotated[str, Field(min_length=3), AfterValidator(_check_bootstrap)]


class _Model(BaseModel):
    """Base of every resource model: camelCase on the wire, unknown fields rejected.

    A real API server prunes unknown fields before we see them; rejecting them here still catches
    typos (``localRetentionMS``) wherever pruning is off or a client talks to us without a CRD.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class SecretRef(_Model):
    """A Secret in the namespace of the custom resource."""

    name: ObjectName = Field(description="Name of the Secret, in the same namespace as this resource.")


class KafkaCluster(_Model):
    """How to reach the Kafka cluster that owns the topic."""

    bootstrap_servers: BootstrapServers = Field(
        description="Comma-separated host:port list of the cluster's bootstrap brokers."
    )
    client_config_secret_ref: SecretRef | None = Field(
        default=None,
        description="Secret whose keys are extra Kafka client properties (security.protocol, sasl.*); "
        "omit for a plaintext listener.",
    )


class RemoteStorage(_Model):
    """The object store holding the remote tier, addressed as an fsspec URL."""

    url: RemoteUrl = Field(
        description="fsspec URL of the remote tier's root, e.g. s3://bucket/prefix, gs://bucket/prefix, "
        "abfs://container@account.dfs.core.windows.net/prefix."
    )
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description="Non-secret fsspec storage options, e.g. endpoint_url or region_name.",
    )
    storage_options_secret_ref: SecretRef | None = Field(
        default=None,
        description="Secret whose keys are merged into the storage options (credentials such as key and "
        "secret); omit to use the pod's ambient identity.",
    )


class CopyPolicy(_Model):
    """When rolled segments are copied to the remote tier."""

    interval_seconds: int = Field(
        default=300,
        ge=10,
        le=604800,
        description="Seconds between copy passes. Mutually exclusive with schedule.",
    )
    schedule: Annotated[str, AfterValidator(_check_cron)] | None = Field(
        default=None,
        description="Cron expression (5 fields, or @hourly/@daily/...) for copy passes, in UTC. "
        "Mutually exclusive with intervalSeconds.",
    )

    @model_validator(mode="after")
    def _one_trigger(self) -> CopyPolicy:
        if self.schedule is not None and "interval_seconds" in self.model_fields_set:
            raise ValueError("copy.schedule and copy.intervalSeconds are mutually exclusive; set one")
        return self


def _check_local_within_remote(name: str, local: int, remote: int) -> None:
    if remote == INFINITE:
        return
    if local == INFINITE or local > remote:
        local_text = "-1 (infinite)" if local == INFINITE else str(local)
        raise ValueError(
            f"local{name} {local_text} exceeds remote{name} {remote}: local retention must not "
            "exceed remote retention (-1 means infinite)"
        )


class TieredTopicSpec(_Model):
    """Desired tiering of one Kafka topic."""

    kafka_cluster: KafkaCluster = Field(description="The Kafka cluster that owns the topic.")
    topic: TopicName = Field(description="Name of the Kafka topic to tier.")
    remote: RemoteStorage = Field(description="Where the remote tier of this topic lives.")
    local_retention_ms: RetentionMs = Field(
        default=86_400_000,
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
        default=INFINITE,
        description="Per-partition bytes kept in the remote tier; -1 means no limit.",
    )
    copy_policy: CopyPolicy = Field(
        default_factory=CopyPolicy,
        alias="copy",
        description="When rolled segments are copied to the remote tier.",
    )
    paused: bool = Field(
        default=False,
        description="Stop copying and trimming for this topic until set back to false.",
    )

    @model_validator(mode="after")
    def _local_within_remote(self) -> TieredTopicSpec:
        _check_local_within_remote("RetentionMs", self.local_retention_ms, self.remote_retention_ms)
        _check_local_within_remote("RetentionBytes", self.local_retention_bytes, self.remote_retention_bytes)
        return self


class LogDirClaim(_Model):
    """The PersistentVolumeClaim that holds a broker's log directory."""

    claim_name: ObjectName = Field(description="Name of the PersistentVolumeClaim, in this namespace.")
    sub_path: str | None = Field(
        default=None, description="Sub-path inside the volume where the log directory lives."
    )


class RebuildPolicy(_Model):
    """Whether and how a broker's log directory is rebuilt from the remote tier."""

    policy: Literal["Never", "WhenLogDirEmpty"] = Field(
        default="Never",
        description="Never: the broker re-replicates from its peers as usual. WhenLogDirEmpty: when the "
        "log directory holds no partition directories, restore tiered segments into it before the "
        "broker catches up.",
    )
    parallelism: int = Field(default=4, ge=1, le=64, description="Partitions restored at the same time.")


class ReplicaFetchers(_Model):
    """How num.replica.fetchers is chosen for the broker."""

    mode: Literal["auto", "fixed"] = Field(
        default="auto",
        description="auto: pick a fetcher count in [min, max] that spreads the followed partitions evenly "
        "across fetcher threads. fixed: always use value.",
    )
    minimum: int = Field(default=1, ge=1, le=64, alias="min", description="Lowest count auto may pick.")
    maximum: int = Field(default=8, ge=1, le=64, alias="max", description="Highest count auto may pick.")
    value: int | None = Field(default=None, ge=1, le=64, description="The count used in fixed mode.")

    @model_validator(mode="after")
    def _mode_fields(self) -> ReplicaFetchers:
        if self.mode == "fixed":
            if self.value is None:
                raise ValueError("replicaFetchers.value is required when mode is fixed")
            if self.model_fields_set & {"minimum", "maximum"}:
                raise ValueError("replicaFetchers.min/max apply to mode auto only; remove them in fixed mode")
        else:
            if self.value is not None:
                raise ValueError("replicaFetchers.value applies to mode fixed only; use min/max with auto")
            if self.minimum > self.maximum:
                raise ValueError(
                    f"replicaFetchers.min {self.minimum} is greater than replicaFetchers.max {self.maximum}"
                )
        return self


class TieredBrokerSpec(_Model):
    """One Kafka broker whose log directory Tierkeeper looks after."""

    bootstrap_servers: BootstrapServers = Field(
        description="Comma-separated host:port list of the cluster's bootstrap brokers."
    )
    client_config_secret_ref: SecretRef | None = Field(
        default=None,
        description="Secret whose keys are extra Kafka client properties (security.protocol, sasl.*).",
    )
    broker_id: int = Field(ge=0, le=2_147_483_647, description="The broker's node.id.")
    log_dir: Annotated[str, AfterValidator(_check_absolute_path)] = Field(
        default="/var/lib/kafka/data",
        description="Absolute path of the broker's log directory (log.dirs) inside the volume mount.",
    )
    log_dir_claim: LogDirClaim = Field(description="The PersistentVolumeClaim holding the log directory.")
    remote: RemoteStorage = Field(description="Where the remote tier lives.")
    rebuild: RebuildPolicy = Field(default_factory=RebuildPolicy, description="Rebuild from the remote tier.")
    replica_fetchers: ReplicaFetchers | None = Field(
        default=None,
        description="Management of num.replica.fetchers; omit to leave the broker's setting alone.",
    )
    paused: bool = Field(default=False, description="Take no action for this broker until set back to false.")


class Phase(enum.StrEnum):
    """Where a resource stands, as shown in ``kubectl get``."""

    PENDING = "Pending"
    ACCEPTED = "Accepted"
    INVALID = "Invalid"


class Condition(_Model):
    """A Kubernetes-style condition."""

    type: str = Field(description="Condition type, e.g. Accepted.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word saying why.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str = Field(description="RFC 3339 time the status last changed.")
    observed_generation: int | None = Field(
        default=None, description="metadata.generation the condition was computed from."
    )


class ResourceStatus(_Model):
    """Status fields shared by both resources; written by the operator only."""

    phase: Phase = Field(default=Phase.PENDING, description="Pending, Accepted or Invalid.")
    message: str = Field(default="", description="One line explaining the phase.")
    observed_generation: int | None = Field(
        default=None, description="metadata.generation of the spec the operator last handled."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Latest observations of the resource's state.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class TieredTopicStatus(ResourceStatus):
    """Observed state of a TieredTopic."""


class TieredBrokerStatus(ResourceStatus):
    """Observed state of a TieredBroker."""
