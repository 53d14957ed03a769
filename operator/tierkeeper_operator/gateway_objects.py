"""The Kubernetes objects of a TieredCluster's gateway: pure functions from the resolved cluster
configuration, its ``spec.gateway`` and the brokers' ids to the manifests the operator applies.

- One Deployment of ``tierkeeper gateway`` pods: the cluster's Kafka client Secret mounted read-only where
  ``--kafka-config-dir`` points (as for the copy and cleanup Jobs), the storage Secret as environment
  variables (as for the Jobs), the TLS Secret mounted for ``--tls-cert``/``--tls-key``; the restricted
  Pod Security profile; readiness and liveness probes on the gateway's HTTP endpoints; rolling updates
  with ``maxUnavailable: 0`` (a new pod is ready before an old one goes, so a rollout never drops all
  replicas); a pod annotation hashing the configuration the pods run with.
- One Service: the bootstrap port, one port per broker at ``brokerPortBase + id`` and the metrics port.
- A PodDisruptionBudget (``maxUnavailable: 1``: a node drain takes one gateway pod at a time) and a
  NetworkPolicy admitting the Service's ports only; a ServiceMonitor when the chart enables them.
  ``maxUnavailable: 1`` rather than ``minAvailable: 1``: with the default 2 replicas both keep one pod
  serving through a drain, but ``maxUnavailable`` also scales with ``replicas`` (3 keep 2), and with
  ``replicas: 1`` ``minAvailable: 1`` would block every node drain for good (no eviction ever allowed),
  while ``maxUnavailable: 1`` lets the drain proceed, as a one-pod choice implies.
- Replicas are interchangeable (storage_core/gateway/DESIGN.md, "Replicas"): every pod runs the same
  arguments, advertising the Service's name and the same ports, and keeps nothing a client needs on its
  next connection, so the Service may send any connection to any pod; preferred anti-affinity by hostname
  spreads them over nodes where there are enough (required would leave a pod pending on a one-node
  cluster).

Brokers coming and going change the Service's ports and the NetworkPolicy's only, never the pod
template: a broker's port is not listed among the container's ports (a Service's numeric targetPort needs
no containerPort, and the gateway learns the brokers itself), so adding a broker restarts no gateway pod
and cuts no client's connection.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.cluster_parts import DEFAULT_GATEWAY_METRICS_PORT, GatewaySpec
from storage_core.gateway.group_sightings import GATEWAY_ID_ENV
from storage_core.reconcile.requests import kafka_client, remote_tier
from tierkeeper_operator.jobs import (
    KAFKA_CONFIG_DIR,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    Owner,
    restricted_container_security,
    restricted_pod_security,
)
from tierkeeper_operator.settings import GatewaySettings

COMPONENT = "gateway"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
ANNOTATION_CONFIG_HASH = "tierkeeper.io/config-hash"
CONTAINER = "gateway"
TLS_DIR = "/etc/tierkeeper/gateway-tls"
METRICS_PORT = DEFAULT_GATEWAY_METRICS_PORT
SHUTDOWN_GRACE_SECONDS = 30
"""What the gateway gives in-flight requests on SIGTERM; the pod's grace period adds 10 s to it."""
MAX_NAME = 63


class GatewayPortError(ValueError):
    """A broker's port would fall outside 1-65535 or on another port of the gateway."""


def gateway_name(cluster_name: str) -> str:
    """``<cluster>-gateway``, the name of all its objects; a Service's name is a DNS label (63 at most),
    so a long cluster name is cut and a hash of it keeps two such names apart."""
    name = f"{cluster_name}-gateway"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(cluster_name.encode()).hexdigest()[:8]
    return f"{cluster_name[: MAX_NAME - len('-gateway') - 9].rstrip('-.')}-{digest}-gateway"


def advertised_host(cluster_name: str, namespace: str, gateway: GatewaySpec) -> str:
    return gateway.advertised_host or f"{gateway_name(cluster_name)}.{namespace}.svc"


def bootstrap_address(cluster_name: str, namespace: str, gateway: GatewaySpec) -> str:
    """What clients put in bootstrap.servers (the TieredCluster's status shows it)."""
    return f"{advertised_host(cluster_name, namespace, gateway)}:{gateway.bootstrap_port}"


def selector_labels(cluster_name: str) -> dict[str, str]:
    return {LABEL_NAME: "tierkeeper-gateway", LABEL_INSTANCE: cluster_name, LABEL_COMPONENT: COMPONENT}


def _labels(cluster_name: str) -> dict[str, str]:
    return {**selector_labels(cluster_name), LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: cluster_name}


def broker_ports(
    gateway: GatewaySpec, broker_ids: Iterable[int], metrics_port: int = METRICS_PORT
) -> dict[int, int]:
    """Broker id -> the port serving it, checked against the gateway's other ports."""
    taken = {gateway.bootstrap_port: "the bootstrap port", metrics_port: "the metrics port"}
    out: dict[int, int] = {}
    for broker in sorted(set(broker_ids)):
        port = gateway.broker_port_base + broker
        if port > 65535:
            raise GatewayPortError(
                f"broker {broker}: port {gateway.broker_port_base}+{broker} is above 65535; lower "
                "gateway.brokerPortBase"
            )
        if port in taken:
            raise GatewayPortError(
                f"broker {broker}: port {port} is {taken[port]}; change gateway.brokerPortBase"
            )
        out[broker] = port
    return out


def _port_name(broker: int) -> str:
    name = f"broker-{broker}"
    return name if len(name) <= 15 else f"b{broker}"  # a port's name is at most 15 characters


def _metadata(name: str, namespace: str, cluster_name: str, owner: Owner) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": _labels(cluster_name),
        "ownerReferences": [owner.reference()],
    }


def _quantities(values: Mapping[str, str | None]) -> dict[str, str]:
    return {key: value for key, value in values.items() if value}


def gateway_args(
    cluster: KafkaClusterConfig, gateway: GatewaySpec, namespace: str, metrics_port: int = METRICS_PORT
) -> list[str]:
    """The pods' ``tierkeeper gateway`` command line: no secret in it (they are files and variables)."""
    args = [
        "gateway",
        "--bootstrap-servers",
        cluster.bootstrap_servers,
        "--listen",
        f"0.0.0.0:{gateway.bootstrap_port}",
        "--broker-port-base",
        str(gateway.broker_port_base),
        "--advertised-host",
        advertised_host(cluster.name, namespace, gateway),
        "--metrics-listen",
        f"0.0.0.0:{metrics_port}",
        "--cache-bytes",
        str(gateway.cache_bytes),
        "--shutdown-grace-seconds",
        str(SHUTDOWN_GRACE_SECONDS),
        "--log-format",
        "json",
    ]
    if gateway.tls_secret_ref is not None:
        args += ["--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key"]
    return args + remote_tier(cluster).args() + kafka_client(cluster, KAFKA_CONFIG_DIR).args()


def config_hash(cluster: KafkaClusterConfig, gateway: GatewaySpec) -> str:
    """A digest of the configuration the pods run with: a changed TieredCluster rolls them."""
    text = json.dumps(
        [cluster.model_dump(mode="json", by_alias=True), gateway.model_dump(mode="json", by_alias=True)],
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _pod_spec(
    cluster: KafkaClusterConfig, gateway: GatewaySpec, namespace: str, metrics_port: int
) -> dict[str, Any]:
    jobs = cluster.jobs
    probe = {"port": "metrics", "scheme": "HTTP"}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": gateway.image or jobs.image,
        "imagePullPolicy": jobs.image_pull_policy,
        "args": gateway_args(cluster, gateway, namespace, metrics_port),
        "ports": [
            {"name": "bootstrap", "containerPort": gateway.bootstrap_port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": metrics_port, "protocol": "TCP"},
        ],
        "resources": {
            "requests": _quantities(gateway.resources.requests.model_dump(by_alias=True)),
            "limits": _quantities(gateway.resources.limits.model_dump(by_alias=True)),
        },
        # Ready: the gateway reaches a broker and the bucket (it answers 503 otherwise); live: it serves.
        "readinessProbe": {
            "httpGet": {"path": "/readyz", **probe},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", **probe},
            "initialDelaySeconds": 10,
            "periodSeconds": 20,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "securityContext": restricted_container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        # Each replica names itself in the consumer groups it reports (__tierkeeper_gateway_groups).
        "env": [{"name": GATEWAY_ID_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    }
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    storage_secret = cluster.remote.storage_options_secret_ref
    if storage_secret is not None:
        # As for the Jobs: the provider reads its credentials from the environment (AWS_ACCESS_KEY_ID, ...).
        container["envFrom"] = [{"secretRef": {"name": storage_secret.name}}]
    if cluster.client_config_secret_ref is not None:
        container["volumeMounts"].append(
            {"name": "kafka-client", "mountPath": KAFKA_CONFIG_DIR, "readOnly": True}
        )
        volumes.append(
            {"name": "kafka-client", "secret": {"secretName": cluster.client_config_secret_ref.name}}
        )
    if gateway.tls_secret_ref is not None:
        container["volumeMounts"].append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        volumes.append({"name": "tls", "secret": {"secretName": gateway.tls_secret_ref.name}})
    spec: dict[str, Any] = {
        "securityContext": restricted_pod_security(),
        "containers": [container],
        "volumes": volumes,
        "automountServiceAccountToken": False,  # the gateway never talks to the Kubernetes API
        "terminationGracePeriodSeconds": SHUTDOWN_GRACE_SECONDS + 10,
        # Replicas on different nodes where there are enough: one node lost keeps the gateway up.
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": selector_labels(cluster.name)},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        },
    }
    if jobs.service_account_name:  # the pods' ambient identity for the bucket, as the Jobs'
        spec["serviceAccountName"] = jobs.service_account_name
    return spec


def deployment(
    cluster: KafkaClusterConfig,
    gateway: GatewaySpec,
    namespace: str,
    owner: Owner,
    settings: GatewaySettings | None = None,
) -> dict[str, Any]:
    metrics_port = (settings or GatewaySettings()).metrics_port
    name = gateway_name(cluster.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(name, namespace, cluster.name, owner),
        "spec": {
            "replicas": gateway.replicas,
            "selector": {"matchLabels": selector_labels(cluster.name)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {
                    "labels": _labels(cluster.name),
                    "annotations": {ANNOTATION_CONFIG_HASH: config_hash(cluster, gateway)},
                },
                "spec": _pod_spec(cluster, gateway, namespace, metrics_port),
            },
        },
    }


def served_ports(gateway: GatewaySpec, broker_ids: Iterable[int], metrics_port: int) -> list[tuple[str, int]]:
    """(name, port) of every port the gateway pod listens on, what its Service and NetworkPolicy open.
    Raises :class:`GatewayPortError` for a broker whose port is impossible."""
    brokers = broker_ports(gateway, broker_ids, metrics_port)
    return [
        ("bootstrap", gateway.bootstrap_port),
        *((_port_name(broker), port) for broker, port in brokers.items()),
        ("metrics", metrics_port),
    ]


def service(
    cluster: KafkaClusterConfig,
    gateway: GatewaySpec,
    namespace: str,
    ports: list[tuple[str, int]],
    owner: Owner,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(gateway_name(cluster.name), namespace, cluster.name, owner),
        "spec": {
            "type": gateway.service_type,
            "selector": selector_labels(cluster.name),
            "ports": [
                {"name": name, "port": port, "targetPort": port, "protocol": "TCP"} for name, port in ports
            ],
        },
    }


def pod_disruption_budget(cluster: KafkaClusterConfig, namespace: str, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(gateway_name(cluster.name), namespace, cluster.name, owner),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(cluster.name)}},
    }


def network_policy(
    cluster: KafkaClusterConfig, namespace: str, ports: list[tuple[str, int]], owner: Owner
) -> dict[str, Any]:
    """Ingress to the gateway's ports only, from anywhere (its clients are wherever Kafka's are); egress
    stays open (the brokers and the bucket are at addresses only the cluster configuration knows)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(gateway_name(cluster.name), namespace, cluster.name, owner),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(cluster.name)},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": port} for _, port in ports]}],
        },
    }


def service_monitor(
    cluster: KafkaClusterConfig, namespace: str, owner: Owner, settings: GatewaySettings
) -> dict[str, Any]:
    metadata = _metadata(gateway_name(cluster.name), namespace, cluster.name, owner)
    metadata["labels"] = {**settings.service_monitor_labels, **metadata["labels"]}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": selector_labels(cluster.name)},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": settings.scrape_interval}],
        },
    }


GATEWAY_KINDS = ("Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor")
"""Every kind of object a gateway may have, in the order they are applied."""


def gateway_objects(
    cluster: KafkaClusterConfig,
    gateway: GatewaySpec,
    broker_ids: Iterable[int],
    owner: Owner,
    settings: GatewaySettings | None = None,
) -> list[dict[str, Any]]:
    """Every object the gateway of ``cluster`` should have now, in the namespace of its ``owner`` (an
    ownerReference reaches only its own namespace); none when ``gateway.enabled`` is false: the caller
    deletes what exists. Raises :class:`GatewayPortError` (one line) for an impossible port."""
    if not gateway.enabled:
        return []
    namespace = owner.namespace
    settings = settings or GatewaySettings()
    ports = served_ports(gateway, sorted(set(broker_ids)), settings.metrics_port)
    objects = [
        deployment(cluster, gateway, namespace, owner, settings),
        service(cluster, gateway, namespace, ports, owner),
        pod_disruption_budget(cluster, namespace, owner),
        network_policy(cluster, namespace, ports, owner),
    ]
    if settings.service_monitor:
        objects.append(service_monitor(cluster, namespace, owner, settings))
    return objects


def ready_replicas(deployment_obj: Mapping[str, Any] | None) -> int:
    """Ready gateway pods of the Deployment as last observed (0 when it does not exist)."""
    if not deployment_obj:
        return 0
    return int((deployment_obj.get("status") or {}).get("readyReplicas") or 0)
