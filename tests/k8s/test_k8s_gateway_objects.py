"""The objects of a TieredCluster's gateway, built from its configuration (pure, no API server): the pods
run ``tierkeeper gateway`` with the cluster's settings and no secret in their spec, under the restricted
profile; the Service has a port per broker that follows the broker ids; a changed configuration rolls the
pods while a broker added or removed does not."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.cluster_parts import GatewaySpec
from storage_core.cli.gateway import gateway_id
from storage_core.cli.main import build_parser
from tierkeeper_operator.gateway_objects import (
    ANNOTATION_CONFIG_HASH,
    GatewayPortError,
    GatewaySettings,
    advertised_host,
    bootstrap_address,
    gateway_name,
    gateway_objects,
    ready_replicas,
)
from tierkeeper_operator.jobs import KAFKA_CONFIG_DIR, Owner

CLUSTER = KafkaClusterConfig.model_validate(
    {
        "name": "prod",
        "bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092",
        "clientConfig": {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"},
        "clientConfigSecretRef": {"name": "kafka-credentials"},
        "remote": {
            "url": "s3://tier/prod",
            "storageOptions": {"client_kwargs": {"endpoint_url": "http://minio:9000"}},
            "storageOptionsSecretRef": {"name": "s3-credentials"},
        },
        "jobs": {"image": "registry.example/tierkeeper/pipeline:1.2.3", "imagePullPolicy": "Always"},
    }
)
GATEWAY = GatewaySpec.model_validate(
    {
        "enabled": True,
        "replicas": 3,
        "tlsSecretRef": {"name": "gateway-tls"},
        "cacheBytes": 1 << 20,
        "resources": {"requests": {"cpu": "500m", "memory": "300Mi"}, "limits": {"memory": "700Mi"}},
    }
)
OWNER = Owner("TieredCluster", "prod", "kafka", "uid-1")


def objects(
    gateway: GatewaySpec = GATEWAY,
    brokers: tuple[int, ...] = (0, 1, 2),
    cluster: KafkaClusterConfig = CLUSTER,
    settings: GatewaySettings | None = None,
) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in gateway_objects(cluster, gateway, brokers, OWNER, settings)}


def pod(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = objs["Deployment"]["spec"]["template"]["spec"]
    return spec


def parsed_args(objs: dict[str, dict[str, Any]]) -> argparse.Namespace:
    return build_parser().parse_args(pod(objs)["containers"][0]["args"])


def test_disabled_gateway_has_no_objects() -> None:
    assert gateway_objects(CLUSTER, GatewaySpec(), [0], OWNER) == []


def test_every_object_is_named_labelled_and_owned_by_the_tiered_cluster() -> None:
    objs = objects()
    assert sorted(objs) == ["Deployment", "NetworkPolicy", "PodDisruptionBudget", "Service"]
    for obj in objs.values():
        meta = obj["metadata"]
        assert (meta["name"], meta["namespace"]) == ("prod-gateway", "kafka")
        assert meta["labels"]["tierkeeper.io/cluster"] == "prod"
        (ref,) = meta["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
            "TieredCluster",
            "prod",
            "uid-1",
            True,
        )
    assert len(gateway_name("x" * 63)) <= 63
    assert gateway_name("x" * 63) != gateway_name("x" * 62 + "y")


def test_pods_run_the_gateway_with_the_clusters_settings() -> None:
    args = parsed_args(objects())
    assert args.handler.__module__ == "storage_core.cli.gateway"
    assert args.bootstrap_servers == CLUSTER.bootstrap_servers
    assert args.listen == "0.0.0.0:9092"
    assert args.broker_port_base == 9100
    assert args.advertised_host == "prod-gateway.kafka.svc"
    assert args.metrics_listen == "0.0.0.0:9404"
    assert args.cache_bytes == 1 << 20
    assert (args.tls_cert, args.tls_key) == (
        "/etc/tierkeeper/gateway-tls/tls.crt",
        "/etc/tierkeeper/gateway-tls/tls.key",
    )
    assert args.remote == "s3://tier/prod"
    assert args.storage_option == ['client_kwargs={"endpoint_url":"http://minio:9000"}']
    assert sorted(args.kafka_property) == ["sasl.mechanism=PLAIN", "security.protocol=SASL_SSL"]
    assert args.kafka_config_dir == KAFKA_CONFIG_DIR
    container = pod(objects())["containers"][0]
    assert container["image"] == "registry.example/tierkeeper/pipeline:1.2.3"
    assert container["imagePullPolicy"] == "Always"
    # Each replica reports the consumer groups it carries under its pod name.
    (variable,) = container["env"]
    assert gateway_id(args, 9092, {variable["name"]: "prod-gateway-7d9f-abcde"}) == "prod-gateway-7d9f-abcde"
    assert args.group_sightings
    assert bootstrap_address("prod", "kafka", GATEWAY) == "prod-gateway.kafka.svc:9092"


def test_advertised_host_and_image_can_be_set() -> None:
    gateway = GATEWAY.model_copy(update={"advertised_host": "kafka.example.com", "image": "gw:2"})
    objs = objects(gateway)
    assert (
        parsed_args(objs).advertised_host == advertised_host("prod", "kafka", gateway) == "kafka.example.com"
    )
    assert pod(objs)["containers"][0]["image"] == "gw:2"
    assert bootstrap_address("prod", "kafka", gateway) == "kafka.example.com:9092"


def test_secrets_are_mounted_never_inlined() -> None:
    spec = pod(objects())
    (container,) = spec["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["kafka-client"] == {"name": "kafka-client", "mountPath": KAFKA_CONFIG_DIR, "readOnly": True}
    assert volumes["kafka-client"]["secret"] == {"secretName": "kafka-credentials"}
    assert mounts["tls"]["readOnly"] and volumes["tls"]["secret"] == {"secretName": "gateway-tls"}
    assert container["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]
    # No value copied out of a Secret: the only variable is the pod's own name (the downward API).
    assert [e["valueFrom"] for e in container["env"]] == [{"fieldRef": {"fieldPath": "metadata.name"}}]
    assert not any("password" in arg or "secret" in arg.lower() for arg in container["args"])


def test_no_secret_means_no_mount() -> None:
    cluster = KafkaClusterConfig.model_validate(
        {"name": "dev", "bootstrapServers": "k:9092", "remote": {"url": "s3://b"}}
    )
    spec = pod(objects(GatewaySpec(enabled=True), cluster=cluster))
    assert [v["name"] for v in spec["volumes"]] == ["tmp"]
    assert "envFrom" not in spec["containers"][0]
    args = build_parser().parse_args(spec["containers"][0]["args"])
    assert args.kafka_config_dir is None and args.tls_cert is None


def test_the_pod_is_restricted() -> None:
    spec = pod(objects())
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert spec["automountServiceAccountToken"] is False
    assert not any("hostPath" in v for v in spec["volumes"])


def test_probes_resources_and_rollout() -> None:
    objs = objects()
    container = pod(objs)["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics", "scheme": "HTTP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTP"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"bootstrap": 9092, "metrics": 9404}
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "300Mi"},
        "limits": {"memory": "700Mi"},
    }
    deployment = objs["Deployment"]["spec"]
    assert deployment["replicas"] == 3
    assert deployment["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    assert (
        deployment["selector"]["matchLabels"].items() <= deployment["template"]["metadata"]["labels"].items()
    )
    assert objs["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert objs["PodDisruptionBudget"]["spec"]["selector"] == deployment["selector"]


def test_the_default_is_two_interchangeable_replicas_spread_over_nodes() -> None:
    """GatewaySpec's defaults (what a TieredCluster or a chart entry that only enables the gateway gets):
    2 pods, a rollout that adds one before it removes one, one pod at a time in a drain, preferably on
    different nodes; every pod advertises the Service's name and the same ports, so any connection may land
    on any pod."""
    default = GatewaySpec(enabled=True)
    assert default.replicas == 2
    objs = objects(default)
    deployment = objs["Deployment"]["spec"]
    assert deployment["replicas"] == 2
    assert deployment["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert objs["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    (term,) = pod(objs)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    labels = deployment["template"]["metadata"]["labels"]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    args = parsed_args(objs)
    assert (args.advertised_host, args.listen, args.broker_port_base) == (
        "prod-gateway.kafka.svc",
        "0.0.0.0:9092",
        9100,
    )
    assert objs["Service"]["spec"]["selector"].items() <= labels.items()


def test_service_ports_follow_the_broker_ids() -> None:
    svc = objects(brokers=(0, 1, 2))["Service"]["spec"]
    assert svc["type"] == "ClusterIP"
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["ports"]] == [
        ("bootstrap", 9092, 9092),
        ("broker-0", 9100, 9100),
        ("broker-1", 9101, 9101),
        ("broker-2", 9102, 9102),
        ("metrics", 9404, 9404),
    ]
    grown = objects(brokers=(0, 1, 2, 7))["Service"]["spec"]["ports"]
    assert ("broker-7", 9107) in [(p["name"], p["port"]) for p in grown]
    shrunk = objects(brokers=(1,))["Service"]["spec"]["ports"]
    assert [p["name"] for p in shrunk] == ["bootstrap", "broker-1", "metrics"]
    policy = objects(brokers=(1, 5))["NetworkPolicy"]["spec"]
    assert [p["port"] for p in policy["ingress"][0]["ports"]] == [9092, 9101, 9105, 9404]
    assert policy["policyTypes"] == ["Ingress"]


@pytest.mark.parametrize("kind", ["NodePort", "LoadBalancer"])
def test_service_type_is_a_choice(kind: str) -> None:
    gateway = GATEWAY.model_copy(update={"service_type": kind})
    assert objects(gateway)["Service"]["spec"]["type"] == kind


def test_brokers_coming_and_going_leave_the_pods_alone() -> None:
    before = objects(brokers=(0, 1, 2))["Deployment"]
    after = objects(brokers=(0, 1, 2, 3))["Deployment"]
    assert before == after


def test_a_changed_configuration_rolls_the_pods() -> None:
    def config_hash(objs: dict[str, dict[str, Any]]) -> str:
        return str(objs["Deployment"]["spec"]["template"]["metadata"]["annotations"][ANNOTATION_CONFIG_HASH])

    base = config_hash(objects())
    assert base == config_hash(objects())
    other_remote = CLUSTER.model_copy(
        update={"remote": CLUSTER.remote.model_copy(update={"url": "s3://other"})}
    )
    assert config_hash(objects(cluster=other_remote)) != base
    assert config_hash(objects(GATEWAY.model_copy(update={"cache_bytes": 2 << 20}))) != base


def test_broker_ports_must_fit() -> None:
    with pytest.raises(GatewayPortError, match="broker 70000: port 9100\\+70000 is above 65535"):
        objects(brokers=(0, 70000))
    with pytest.raises(GatewayPortError, match="broker 304: port 9404 is the metrics port"):
        objects(brokers=(304,))
    low = GATEWAY.model_copy(update={"broker_port_base": 9090})
    with pytest.raises(GatewayPortError, match="port 9092 is the bootstrap port"):
        objects(low, brokers=(2,))


def test_service_monitor_when_the_chart_enables_them() -> None:
    assert "ServiceMonitor" not in objects()
    settings = GatewaySettings(service_monitor=True, service_monitor_labels={"release": "prom"})
    monitor = objects(settings=settings)["ServiceMonitor"]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert monitor["spec"]["selector"]["matchLabels"] == objects()["Service"]["spec"]["selector"]


def test_ready_replicas() -> None:
    assert ready_replicas(None) == 0
    assert ready_replicas({"status": {}}) == 0
    assert ready_replicas({"status": {"readyReplicas": 2}}) == 2
