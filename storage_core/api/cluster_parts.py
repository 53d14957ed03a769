"""The parts of a TieredCluster that are new with the kind: the gateway the operator runs for the cluster,
and the Strimzi ``Kafka`` the cluster's brokers and bootstrap address are learned from.

Kept apart from ``cluster.py`` (the connection and the remote tier, shared with the older file form of the
cluster configuration) so the builders of the gateway's objects and of Strimzi's TieredBrokers depend on
nothing else of the API.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from storage_core.api.cluster import ResourceQuantities, SecretRef, quantities_field
from storage_core.api.fields import NonEmptyStr, ObjectName, Port
from storage_core.api.rules import ApiModel

DEFAULT_GATEWAY_BOOTSTRAP_PORT = 9092
DEFAULT_GATEWAY_BROKER_PORT_BASE = 9100
DEFAULT_GATEWAY_METRICS_PORT = 9404
DEFAULT_GATEWAY_CACHE_BYTES = 64 << 20
"""A gateway's cache of remote blocks, the TieredCluster's and ``tierkeeper gateway --cache-bytes``'s."""


class GatewayResources(ApiModel):
    requests: ResourceQuantities = quantities_field(
        "What the scheduler reserves for each gateway pod.", cpu="250m", memory="256Mi"
    )
    limits: ResourceQuantities = quantities_field(
        "Upper bounds for each gateway pod (the block cache is counted in memory).", memory="512Mi"
    )


class GatewaySpec(ApiModel):
    """The cluster's Kafka protocol gateway: every unchanged Kafka client reads the tiered history
    through it. The operator owns its Deployment, Service, PodDisruptionBudget and NetworkPolicy."""

    enabled: bool = Field(default=False, description="Run the gateway for this cluster.")
    replicas: int = Field(
        default=2,
        ge=1,
        description="Gateway pods. Each serves every broker's port (a client's connection is proxied to "
        "the broker whose port it reached) and advertises the Service's address, so any replica can take "
        "any connection. Rollouts add a pod before removing one, a PodDisruptionBudget lets node drains "
        "take one pod at a time, and pods prefer different nodes.",
    )
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        default="ClusterIP", description="Type of the gateway's Service."
    )
    bootstrap_port: Port = Field(
        default=DEFAULT_GATEWAY_BOOTSTRAP_PORT,
        description="The Service's bootstrap port (what clients put in bootstrap.servers).",
    )
    broker_port_base: Port = Field(
        default=DEFAULT_GATEWAY_BROKER_PORT_BASE,
        description="Broker N is served at this port + N, on the pods and on the Service.",
    )
    advertised_host: NonEmptyStr | None = Field(
        default=None,
        description="The host clients are told to connect to (default: the Service's cluster DNS name, "
        "<name>.<namespace>.svc); set it when clients reach the Service through a LoadBalancer's name.",
    )
    image: NonEmptyStr | None = Field(
        default=None, description="The gateway's image (default: the Jobs' pipeline image)."
    )
    resources: GatewayResources = Field(
        default_factory=GatewayResources, description="Requests and limits of each gateway pod."
    )
    cache_bytes: int = Field(
        default=DEFAULT_GATEWAY_CACHE_BYTES,
        ge=0,
        description="Each pod's cache of remote blocks, in bytes (0: no cache).",
    )
    tls_secret_ref: SecretRef | None = Field(
        default=None,
        description="A kubernetes.io/tls Secret (tls.crt, tls.key): clients then connect to the gateway with "
        "TLS. Omit for plaintext.",
    )


class StrimziRef(ApiModel):
    """A Strimzi ``Kafka`` in the TieredCluster's namespace: the bootstrap address comes from its
    ``status.listeners``, and a TieredBroker is kept for every broker node of its node pools."""

    kafka: ObjectName = Field(description="Name of the Strimzi Kafka resource.")
    listener: NonEmptyStr = Field(
        default="plain",
        description="Name of the Kafka listener (spec.kafka.listeners[].name) whose bootstrap address "
        "Tierkeeper's clients use.",
    )
