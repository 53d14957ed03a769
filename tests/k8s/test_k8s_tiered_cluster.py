"""TieredCluster on the harness's real control plane, with the session's real Kafka broker and moto S3: the
API server refuses a malformed one (CEL); one created after the operator started goes through a wrong
bootstrap address (Ready=False, Reconciling), a missing bucket (Stalled, found by a real bucket-check Job
the process kubelet runs with the storage Secret) and, once both are fixed by spec edits, Ready; kstatus
(the real Go library, reading the live object) says InProgress, Failed, Current and Terminating at each
step, and the Argo CD health script (in a real Lua) Progressing, Degraded, Healthy and Progressing;
deleting it while a TieredTopic names it waits for that TieredTopic. The operator's rounds run as
the chart's ClusterRole; a TieredCluster's client Secret is readable only by name, through the chart's
Role with resourceNames, never listed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import s3fs
import yaml
from test_k8s_cluster_objects import STRIMZI
from test_k8s_operator_real import DEADLINE, chart_rbac, resource

from harness.argocd_lua import run_health
from harness.control_plane import ControlPlane
from harness.k8s import load_crds
from harness.kafka import KafkaCluster
from harness.kstatus import kstatus_live
from harness.kube_rest import ApiError
from harness.moto_s3 import MotoServer
from harness.paths import REPO_ROOT
from harness.tools import run_tool
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import parse_spec
from storage_core.api.tiered_cluster import TieredClusterSpec, TieredClusterStatus, resolve
from storage_core.reconcile.tiered_clusters import ClusterObject, directory
from tierkeeper_operator.compose import build_reconciler
from tierkeeper_operator.gateway_objects import gateway_name
from tierkeeper_operator.job_kinds import JobKind
from tierkeeper_operator.jobs import LABEL_KIND
from tierkeeper_operator.kube import Kube, KubeError

API = "/apis/tierkeeper.io/v1alpha1/namespaces"
HEALTH_LUA = REPO_ROOT / "gitops/argocd/resource_customizations/tierkeeper.io/_/health.lua"


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in (obj.get("status") or {}).get("conditions", [])}


def test_tiered_cluster_states_on_the_real_api_server(
    k8s_control_plane: ControlPlane, k8s_namespace: str, kafka_broker: KafkaCluster, moto_server: MotoServer
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    plane.apply_crds(load_crds())
    path = f"{API}/{ns}/tieredclusters"

    # The CEL rule spans two fields: neither bootstrapServers nor strimzi is refused at admission.
    with pytest.raises(ApiError) as refused:
        plane.request("POST", path, resource("TieredCluster", "bad", {"remote": {"url": "s3://b/t"}}))
    assert refused.value.code == 422
    assert "bootstrapServers is required unless strimzi names the Kafka" in refused.value.message

    options = moto_server.storage_options()
    bucket = f"tk-{ns}"
    s3fs.S3FileSystem(**options).mkdir(bucket)
    secret = {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]}
    plane.request(
        "POST", f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": "s3"}, "stringData": secret}
    )
    reconciler = build_reconciler(Kube(plane.api_client(token=chart_rbac(plane, ns)), (ns,)), {})
    reconciler.run_round()  # the operator runs before the TieredCluster exists

    def live() -> tuple[str, str]:
        (result,) = kstatus_live(plane.kubeconfig, "tierkeeper.io/v1alpha1/tieredclusters", ns, "main")
        return result.status, result.message

    spec = {
        "bootstrapServers": "127.0.0.1:1",  # nothing listens there
        "remote": {
            "url": f"s3://missing-{ns}/tier",
            "storageOptions": {k: options[k] for k in ("client_kwargs", "config_kwargs")},
            "storageOptionsSecretRef": {"name": "s3"},
        },
        "jobs": {"image": "tierkeeper", "ttlSecondsAfterFinished": 600},
    }
    plane.request("POST", path, resource("TieredCluster", "main", spec))
    assert live()[0] == "InProgress"  # not observed yet

    def argo(obj: dict[str, Any]) -> tuple[str, str]:
        """Argo CD's verdict on the live object, by the health.lua docs/gitops.md has users install."""
        health = run_health(HEALTH_LUA, obj)
        return health["status"], health["message"]

    def rounds_until(done: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        deadline = time.monotonic() + DEADLINE
        obj: dict[str, Any] = {}
        while time.monotonic() < deadline:
            reconciler.run_round()
            obj = plane.request("GET", f"{path}/main")
            if done(obj):
                return obj
            time.sleep(1)
        raise AssertionError(f"{what}: {obj.get('status')}")

    obj = rounds_until(lambda o: "Ready" in conditions(o), "first status")
    assert conditions(obj) == {
        "Ready": ("False", "KafkaUnreachable"),
        "Reconciling": ("True", "KafkaUnreachable"),
    }
    assert "127.0.0.1:1" in obj["status"]["message"] and "\n" not in obj["status"]["message"]
    assert obj["status"]["kafka"]["reachable"] is False
    assert live()[0] == "InProgress"
    assert argo(obj) == ("Progressing", obj["status"]["message"])
    assert "finalizers" in obj["metadata"] and "tierkeeper.io/tiered-cluster" in obj["metadata"]["finalizers"]

    patch = {"spec": {"bootstrapServers": kafka_broker.bootstrap_servers}}
    plane.rest().call("PATCH", f"{path}/main", patch, content_type="application/merge-patch+json")
    obj = rounds_until(lambda o: "Stalled" in conditions(o), "a missing bucket")
    assert conditions(obj)["Stalled"] == ("True", "BucketUnreachable")
    message = obj["status"]["message"]
    assert f"missing-{ns}" in message and "does not exist" in message, message
    assert obj["status"]["kafka"]["brokerIds"] == sorted(kafka_broker.node_ids)
    assert (obj["status"]["kafka"]["metadataVersion"], obj["status"]["kafka"]["brokerRelease"]) == (
        "4.1-IV1",
        "4.1",
    )
    assert obj["status"]["bucket"]["job"]
    assert live() == ("Failed", message)
    assert argo(obj) == ("Degraded", message)
    checks = plane.request(
        "GET",
        f"/apis/batch/v1/namespaces/{ns}/jobs?labelSelector={LABEL_KIND}%3D{JobKind.BUCKET_CHECK.value}",
    )
    job = checks["items"][0]
    assert job["spec"]["template"]["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "s3"}}]

    patch = {"spec": {"remote": {"url": f"s3://{bucket}/tier"}}}
    plane.rest().call("PATCH", f"{path}/main", patch, content_type="application/merge-patch+json")
    obj = rounds_until(lambda o: conditions(o).get("Ready", ("",))[0] == "True", "ready once fixed")
    assert conditions(obj) == {"Ready": ("True", "Ready")}
    assert obj["status"]["bucket"]["reachable"] is True
    assert live()[0] == "Current"
    assert argo(obj) == ("Healthy", obj["status"]["message"])
    reasons = {e["reason"] for e in plane.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]}
    assert {"KafkaUnreachable", "BucketUnreachable", "Ready"} <= reasons, reasons

    # Deleting it while a TieredTopic names it deletes nothing: the finalizer waits for the TieredTopic.
    topic = {"clusterRef": {"name": "main"}, "topic": "absent", "paused": True}
    plane.request("POST", f"{API}/{ns}/tieredtopics", resource("TieredTopic", "t", topic))
    obj = rounds_until(lambda o: o["status"].get("tieredTopics") == 1, "the TieredTopic counted")
    plane.request("DELETE", f"{path}/main")
    obj = rounds_until(lambda o: conditions(o)["Ready"][1] == "Deleting", "waiting while named")
    assert "1 TieredTopics" in obj["status"]["message"]
    assert live()[0] == "Terminating"
    assert argo(obj) == ("Progressing", "Pending deletion")
    plane.request("DELETE", f"{API}/{ns}/tieredtopics/t")
    deadline = time.monotonic() + DEADLINE
    names = ["main"]
    while time.monotonic() < deadline and "main" in names:
        reconciler.run_round()
        names = [o["metadata"]["name"] for o in plane.request("GET", path)["items"]]
    assert names == []


def test_a_tiered_clusters_client_secret_is_readable_by_name_only(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    """The chart's rbac.kafkaClientSecrets Role, applied to the real API server: the operator's account may
    `get` the Secret named there and nothing else about Secrets (no other Secret, no list, no watch)."""
    plane, ns = k8s_control_plane, k8s_namespace
    rendered = run_tool(
        "helm",
        [
            "template",
            "tk",
            str(REPO_ROOT / "charts" / "tierkeeper"),
            "--namespace",
            ns,
            "--set-json",
            f'rbac.kafkaClientSecrets=[{{"namespace":"{ns}","name":"kafka-client"}}]',
        ],
    ).stdout
    docs = [
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["metadata"]["name"].endswith("kafka-client-secrets")
    ]
    assert sorted(d["kind"] for d in docs) == ["Role", "RoleBinding"]
    (role,) = [d for d in docs if d["kind"] == "Role"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["kafka-client"]}
    ]
    plane.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "tk-tierkeeper"}})
    for doc in docs:
        plural = "roles" if doc["kind"] == "Role" else "rolebindings"
        plane.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{plural}", doc)
    for name in ("kafka-client", "other"):
        body = {"metadata": {"name": name}, "stringData": {"sasl.username": "u", "sasl.password": "p"}}
        plane.request("POST", f"/api/v1/namespaces/{ns}/secrets", body)
    kube = Kube(plane.api_client(token=plane.token_for(ns, "tk-tierkeeper")), (ns,))
    deadline = time.monotonic() + 30  # RBAC reaches the authorizer's cache shortly after the write
    while True:
        try:
            assert kube.secret_data(ns, "kafka-client") == {"sasl.username": "u", "sasl.password": "p"}
            break
        except KubeError as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    with pytest.raises(KubeError) as other:
        kube.secret_data(ns, "other")
    assert other.value.status == 403
    token = plane.token_for(ns, "tk-tierkeeper")
    for query in ("", "?watch=1"):
        with pytest.raises(ApiError) as listed:
            plane.request("GET", f"/api/v1/namespaces/{ns}/secrets{query}", token=token)
        assert listed.value.code == 403


def test_the_chart_renders_tiered_clusters_that_agree_with_its_cluster_files() -> None:
    """clusterResources: one TieredCluster per entry of clusters: in each watched namespace, with the
    settings of the entry's file (so the operator accepts both under one name)."""
    values = {
        "clusterResources": True,
        "watchNamespaces": ["a", "b"],
        "clusters": [
            {"name": "main", "bootstrapServers": "kafka:9092", "remote": {"url": "s3://bucket/tier"}},
            {
                "name": "other",
                "bootstrapServers": "other:9092",
                "clientConfigSecretRef": {"name": "other-client"},
                "remote": {"url": "s3://bucket/other"},
                "jobs": {"copyParallelism": 2},
            },
        ],
    }
    rendered = run_tool(
        "helm",
        ["template", "tk", str(REPO_ROOT / "charts" / "tierkeeper"), "--namespace", "ops", "-f", "-"],
        input_text=yaml.safe_dump(values),
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    (config_map,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-clusters")
    ]
    files = {
        name.removesuffix(".yaml"): KafkaClusterConfig.model_validate(yaml.safe_load(text))
        for name, text in config_map["data"].items()
    }
    clusters = [d for d in docs if d["kind"] == "TieredCluster"]
    assert sorted((d["metadata"]["namespace"], d["metadata"]["name"]) for d in clusters) == [
        ("a", "main"),
        ("a", "other"),
        ("b", "main"),
        ("b", "other"),
    ]
    for doc in clusters:
        spec = TieredClusterSpec.model_validate(doc["spec"])
        assert resolve(doc["metadata"]["name"], spec) == files[doc["metadata"]["name"]]
    objects = [
        ClusterObject(
            d["metadata"]["namespace"],
            d["metadata"]["name"],
            1,
            "t",
            parse_spec(TieredClusterSpec, d["spec"]),
            TieredClusterStatus(),
        )
        for d in clusters
    ]
    assert directory(objects, files).refused == {}
    # Off by default: an existing install renders what it did before.
    plain = run_tool(
        "helm",
        ["template", "tk", str(REPO_ROOT / "charts" / "tierkeeper"), "--namespace", "ops", "-f", "-"],
        input_text=yaml.safe_dump({k: v for k, v in values.items() if k != "clusterResources"}),
    ).stdout
    assert not [d for d in yaml.safe_load_all(plain) if d and d["kind"] == "TieredCluster"]


def test_a_strimzi_tiered_cluster_with_a_gateway_through_the_rounds(
    k8s_control_plane: ControlPlane, k8s_namespace: str, kafka_broker: KafkaCluster
) -> None:
    """The rounds wire in the Strimzi reader and the gateway's objects: the bootstrap address comes from the
    Strimzi Kafka's status (none written in the TieredCluster), the gateway's Deployment and Service are
    kept while spec.gateway.enabled and deleted once it is turned off."""
    plane, ns = k8s_control_plane, k8s_namespace
    plane.apply_crds(load_crds())
    plane.apply_crds([yaml.safe_load((STRIMZI / "040-Crd-kafka.yaml").read_text())])
    with open(STRIMZI / "example-kafka-persistent.yaml") as f:
        kafka = next(d for d in yaml.safe_load_all(f) if d and d["kind"] == "Kafka")
    base = f"/apis/kafka.strimzi.io/v1/namespaces/{ns}/kafkas"
    made = plane.request("POST", base, kafka)
    made["status"] = {"listeners": [{"name": "plain", "bootstrapServers": kafka_broker.bootstrap_servers}]}
    plane.request("PUT", f"{base}/{kafka['metadata']['name']}/status", made)
    spec = {
        "strimzi": {"kafka": kafka["metadata"]["name"]},
        "remote": {"url": "s3://bucket/tier"},
        "gateway": {"enabled": True, "replicas": 1},
        "jobs": {"image": "tierkeeper"},
    }
    plane.request("POST", f"{API}/{ns}/tieredclusters", resource("TieredCluster", "main", spec))
    reconciler = build_reconciler(Kube(plane.api_client(token=chart_rbac(plane, ns)), (ns,)), {})
    reconciler.run_round()
    obj = plane.request("GET", f"{API}/{ns}/tieredclusters/main")
    status = obj["status"]
    assert status["kafka"]["reachable"] is True, status
    assert status["kafka"]["bootstrapServers"] == kafka_broker.bootstrap_servers
    assert status["strimzi"]["kafka"] == kafka["metadata"]["name"]
    gateway = gateway_name("main")
    deployment = plane.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/{gateway}")
    assert deployment["metadata"]["ownerReferences"][0]["kind"] == "TieredCluster"
    service = plane.request("GET", f"/api/v1/namespaces/{ns}/services/{gateway}")
    assert status["gateway"]["bootstrap"].endswith(f":{service['spec']['ports'][0]['port']}")
    assert conditions(obj)["Ready"][0] == "False"  # the bucket check runs; the gateway's pod starts

    plane.rest().call(
        "PATCH",
        f"{API}/{ns}/tieredclusters/main",
        {"spec": {"gateway": {"enabled": False}}},
        content_type="application/merge-patch+json",
    )
    reconciler.run_round()
    with pytest.raises(ApiError) as gone:
        plane.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/{gateway}")
    assert gone.value.code == 404
    assert "gateway" not in plane.request("GET", f"{API}/{ns}/tieredclusters/main")["status"]
