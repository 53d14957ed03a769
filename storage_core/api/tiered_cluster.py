"""The TieredCluster custom resource: one Kafka cluster as an API object, named by the ``clusterRef`` of the
TieredTopics and TieredBrokers in its namespace.

Its spec is the cluster configuration's settings (:class:`~storage_core.api.cluster.ClusterSettings`, the
same fields the file form has) without ``name`` (``metadata.name`` is the name), with the bootstrap address
optional when a Strimzi ``Kafka`` gives it, plus the gateway the operator runs for the cluster. The rest of
the code sees a TieredCluster only as the :class:`~storage_core.api.cluster.KafkaClusterConfig` that
:func:`resolve` makes of it.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from storage_core.api.cluster import ClusterSettings, KafkaClusterConfig
from storage_core.api.cluster_parts import GatewaySpec, StrimziRef
from storage_core.api.fields import BootstrapServers
from storage_core.api.rules import ApiModel, Rule
from storage_core.api.status import ResourceStatus

KIND = "TieredCluster"
PLURAL = "tieredclusters"


class TieredClusterSpec(ClusterSettings):
    """One Kafka cluster: how to reach it, where its remote tier lives, how its Jobs and gateway run."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="has(self.bootstrapServers) || has(self.strimzi)",
            message="bootstrapServers is required unless strimzi names the Kafka it comes from",
            check=lambda s: s.bootstrap_servers is not None or s.strimzi is not None,
        ),
    )

    bootstrap_servers: BootstrapServers | None = Field(
        default=None,
        description="Comma-separated host:port list of the cluster's bootstrap brokers. Optional with "
        "strimzi (the listener's bootstrap address from the Kafka's status); when both are set, this wins.",
    )
    gateway: GatewaySpec = Field(
        default_factory=GatewaySpec,
        description="The Kafka protocol gateway the operator runs for the cluster.",
    )
    strimzi: StrimziRef | None = Field(
        default=None,
        description="A Strimzi Kafka in this namespace that gives the bootstrap address and TieredBrokers.",
    )


def resolve(name: str, spec: TieredClusterSpec, strimzi_bootstrap: str | None = None) -> KafkaClusterConfig:
    """The cluster configuration a TieredCluster named ``name`` stands for. ``strimzi_bootstrap``: the
    bootstrap address read from the Strimzi Kafka's ``status.listeners`` (used when the spec has none).
    Raises ``ValueError`` (one line) when no bootstrap address is known yet."""
    bootstrap = spec.bootstrap_servers or strimzi_bootstrap
    if not bootstrap:
        kafka = spec.strimzi.kafka if spec.strimzi else "?"
        raise ValueError(f"no bootstrap address yet: Strimzi Kafka {kafka} reports no listener address")
    shared = {field: getattr(spec, field) for field in ClusterSettings.model_fields}
    return KafkaClusterConfig.model_validate({**shared, "name": name, "bootstrap_servers": bootstrap})


class KafkaCheck(ApiModel):
    """What the operator's own Kafka client saw of the cluster, at the last full round."""

    reachable: bool = Field(description="The cluster answered a metadata request.")
    bootstrap_servers: str = Field(default="", description="The bootstrap address used.")
    cluster_id: str | None = Field(default=None, description="Kafka's cluster id.")
    controller_id: int | None = Field(default=None, description="The active controller's node id.")
    broker_ids: list[int] = Field(default_factory=list, description="Node ids of the brokers it lists.")
    metadata_version: str | None = Field(
        default=None,
        description="The cluster's finalized metadata.version (its KRaft feature level, as Kafka names it).",
    )
    broker_release: str | None = Field(
        default=None,
        description=(
            "The Kafka release line of the broker that answered ApiVersions (from the newest "
            "metadata.version it supports; Kafka's protocol tells no exact software version)."
        ),
    )
    message: str = Field(default="", description="One line: why it is not reachable.")
    checked_at: str | None = Field(default=None, description="RFC 3339 time of the check.")


class BucketCheck(ApiModel):
    """The last check of the remote tier, run by a short Job with the credentials the copy Jobs get (the
    operator never reads the storage Secret)."""

    reachable: bool | None = Field(
        default=None, description="The Job listed the remote tier's root; null while the first check runs."
    )
    url: str = Field(default="", description="The remote URL checked.")
    message: str = Field(default="", description="One line: the result, or why it failed.")
    job: str | None = Field(default=None, description="The check Job.")
    checked_at: str | None = Field(default=None, description="RFC 3339 time the check ended.")
    spec_key: str = Field(
        default="", description="Fingerprint of the remote settings checked (a change checks again)."
    )


class GatewayState(ApiModel):
    """The cluster's gateway as the operator last saw it."""

    ready_replicas: int = Field(default=0, ge=0, description="Gateway pods ready.")
    bootstrap: str | None = Field(
        default=None, description="What clients put in bootstrap.servers to read the tiered history."
    )


class StrimziSummary(ApiModel):
    """What spec.strimzi gave at the last full round."""

    kafka: str = Field(description="The Strimzi Kafka read.")
    brokers: list[int] = Field(
        default_factory=list, description="Broker ids with a TieredBroker kept by the operator."
    )
    user_brokers: list[int] = Field(
        default_factory=list, description="Broker ids left to a TieredBroker someone wrote (theirs wins)."
    )
    problems: list[str] = Field(
        default_factory=list,
        description="One line each: what keeps the address or a broker from being known.",
    )


class TieredClusterStatus(ResourceStatus):
    """Observed state of a TieredCluster."""

    kafka: KafkaCheck | None = Field(default=None, description="Is Kafka reachable, and what it reports.")
    bucket: BucketCheck | None = Field(default=None, description="Is the remote tier reachable.")
    tiered_topics: int = Field(default=0, ge=0, description="TieredTopics whose clusterRef names it.")
    tiered_brokers: int = Field(default=0, ge=0, description="TieredBrokers whose clusterRef names it.")
    tiered_bytes: int = Field(default=0, ge=0, description="Bytes in the remote tier, over its TieredTopics.")
    copy_lag_bytes: int = Field(
        default=0, ge=0, description="Bytes rolled on the leaders but not yet tiered, over its TieredTopics."
    )
    gateway: GatewayState | None = Field(default=None, description="The gateway (spec.gateway.enabled).")
    strimzi: StrimziSummary | None = Field(default=None, description="The Strimzi cluster (spec.strimzi).")
