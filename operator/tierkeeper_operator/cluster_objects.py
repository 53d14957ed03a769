"""What a TieredCluster's reconcile does with the objects the operator keeps for it: its gateway (Deployment,
Service, PodDisruptionBudget, NetworkPolicy, ServiceMonitor) and, with ``spec.strimzi``, the TieredBrokers
of the Strimzi cluster's brokers. Decisions are the pure builders' (:mod:`gateway_objects`,
:mod:`strimzi_brokers`); this module only reads and writes through :class:`~tierkeeper_operator.kube.Kube`
and reports the outcome for the TieredCluster's status.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.cluster_parts import GatewaySpec, StrimziRef
from tierkeeper_operator.gateway_objects import (
    GATEWAY_KINDS,
    GatewayPortError,
    bootstrap_address,
    gateway_name,
    gateway_objects,
    ready_replicas,
)
from tierkeeper_operator.jobs import Owner
from tierkeeper_operator.kube import OBJECT_PATHS, Kube
from tierkeeper_operator.settings import GatewaySettings
from tierkeeper_operator.strimzi_brokers import BrokerChanges, StrimziView, broker_changes, strimzi_view

_API_VERSIONS = {kind: api_version for api_version, kind in OBJECT_PATHS}


@dataclass(frozen=True)
class GatewayOutcome:
    """The gateway as the TieredCluster's status shows it."""

    ready_replicas: int
    bootstrap: str | None
    """What clients put in bootstrap.servers (None: no gateway)."""
    problem: str | None = None
    """One line when the objects could not be built (a broker's port out of range)."""


def sync_gateway(
    kube: Kube,
    cluster: KafkaClusterConfig,
    gateway: GatewaySpec,
    broker_ids: Iterable[int],
    owner: Owner,
    settings: GatewaySettings | None = None,
) -> GatewayOutcome:
    """Apply the gateway's objects (idempotent: server-side apply) and delete those no longer wanted
    (all of them when the gateway is disabled, the ServiceMonitor when the chart stops asking for them).
    ``broker_ids``: the brokers Kafka reports now. API errors propagate (:class:`~kube.KubeError`)."""
    name, namespace = gateway_name(cluster.name), owner.namespace
    try:
        wanted = gateway_objects(cluster, gateway, broker_ids, owner, settings)
    except GatewayPortError as exc:
        return GatewayOutcome(0, None, str(exc))
    for obj in wanted:
        kube.apply_object(obj)
    kinds = {obj["kind"] for obj in wanted}
    for kind in GATEWAY_KINDS:
        if kind not in kinds:
            kube.delete_object(_API_VERSIONS[kind], kind, namespace, name)
    if not gateway.enabled:
        return GatewayOutcome(0, None)
    ready = ready_replicas(kube.get_deployment(namespace, name))
    return GatewayOutcome(ready, bootstrap_address(cluster.name, namespace, gateway))


@dataclass(frozen=True)
class StrimziState:
    """What spec.strimzi gave this round."""

    view: StrimziView
    changes: BrokerChanges
    problems: list[str] = field(default_factory=list)
    """The view's and the changes' problems together, one line each."""

    @property
    def bootstrap_servers(self) -> str | None:
        return self.view.bootstrap_servers


def sync_strimzi_brokers(kube: Kube, ref: StrimziRef, namespace: str, owner: Owner) -> StrimziState:
    """Read the Strimzi cluster ``ref`` names and make the TieredBrokers of its brokers match it (the
    TieredCluster ``owner`` is the one whose clusterRef they carry)."""
    kafka = kube.get_strimzi_kafka(namespace, ref.kafka)
    pools = kube.list_strimzi_node_pools(namespace, ref.kafka) if kafka is not None else []
    pods = kube.list_strimzi_broker_pods(namespace, ref.kafka) if kafka is not None else []
    view = strimzi_view(ref, owner.name, kafka, pools, pods)
    existing = [
        b for b in kube.list_resources("tieredbrokers") if b["metadata"].get("namespace") == namespace
    ]
    changes = broker_changes(view, existing, owner, namespace)
    for manifest in [*changes.create, *changes.update]:
        kube.apply_object(manifest)
    for name in changes.delete:
        kube.delete_object(_API_VERSIONS["TieredBroker"], "TieredBroker", namespace, name)
    return StrimziState(view, changes, [*view.problems, *changes.problems])
