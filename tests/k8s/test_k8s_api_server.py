"""What only a real API server shows: our CRDs are structural and served, `kubectl explain` reads their
schema, the schema and CEL rules reject objects at admission, status goes through the status
subresource, RBAC refuses what a Role does not grant, and Pod Security Admission enforces `restricted`."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest
import yaml
from k8s_helpers import DEADLINE, create, service_account_with_role, unique

from harness.control_plane import ControlPlane
from harness.k8s import wait_until
from harness.kstatus import kstatus_live
from harness.kube_rest import ApiError
from harness.paths import REPO_ROOT
from harness.tools import run_tool
from tierkeeper_operator import GROUP, VERSION


def example_topic(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "tieredtopic.yaml").read_text())
    doc["metadata"] = {"name": name}
    return doc


def topics_path(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/tieredtopics"


def test_server_version_is_the_pinned_one(k8s_control_plane: ControlPlane) -> None:
    from harness.k8s_version import KUBERNETES_VERSION

    assert k8s_control_plane.request("GET", "/version")["gitVersion"] == KUBERNETES_VERSION


def test_our_crds_are_established_and_served(k8s_crds: ControlPlane) -> None:
    resources = k8s_crds.request("GET", f"/apis/{GROUP}/{VERSION}")["resources"]
    names = {resource["name"] for resource in resources}
    assert {"tieredtopics", "tieredtopics/status", "tieredbrokers", "tieredbrokers/status"} <= names
    for name in ("tieredtopics.tierkeeper.io", "tieredbrokers.tierkeeper.io"):
        crd = k8s_crds.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        # A non-structural schema would show up as a NonStructuralSchema condition.
        assert conditions.get("Established") == "True" and "NonStructuralSchema" not in conditions


def test_kubectl_explain_reads_the_schema(k8s_crds: ControlPlane) -> None:
    args = ["--kubeconfig", str(k8s_crds.kubeconfig), "explain", "tieredtopic.spec"]

    def explained() -> Any:
        # The server publishes a new CRD's OpenAPI document shortly after it is Established.
        proc = run_tool("kubectl", args, check=False)
        return proc if proc.returncode == 0 else None

    proc = wait_until(explained, DEADLINE)
    assert proc, run_tool("kubectl", args, check=False).stderr
    assert "KIND:       TieredTopic" in proc.stdout
    for field in ("clusterRef", "localRetentionMs", "remoteRetentionMs", "topic", "copy", "deletionPolicy"):
        assert f"  {field}\t" in proc.stdout, proc.stdout


def test_the_schema_rejects_a_wrong_type_at_admission(k8s_crds: ControlPlane, k8s_namespace: str) -> None:
    bad = example_topic("wrong-type")
    bad["spec"]["localRetentionMs"] = "six hours"
    with pytest.raises(ApiError) as refused:
        create(k8s_crds, topics_path(k8s_namespace), bad)
    assert refused.value.code == 422
    assert "spec.localRetentionMs" in refused.value.message and "integer" in refused.value.message


def test_status_goes_through_the_status_subresource_without_bumping_generation(
    kube_client: Any, k8s_namespace: str
) -> None:
    api = kubernetes.client.CustomObjectsApi(kube_client)
    ns = k8s_namespace
    created = api.create_namespaced_custom_object(
        GROUP, VERSION, ns, "tieredtopics", example_topic("payments")
    )
    assert created["metadata"]["generation"] == 1
    # Status sent to the main resource is dropped; spec sent to /status is dropped.
    api.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "tieredtopics", "payments", {"status": {"message": "dropped"}}
    )
    stalled = {
        "type": "Stalled",
        "status": "True",
        "reason": "ClusterNotFound",
        "message": "set through /status",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1,
    }
    api.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        ns,
        "tieredtopics",
        "payments",
        {"status": {"observedGeneration": 1, "conditions": [stalled]}, "spec": {"paused": True}},
    )
    current = api.get_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", "payments")
    assert current["status"] == {"observedGeneration": 1, "conditions": [stalled]}
    assert current["spec"]["paused"] is False
    assert current["metadata"]["generation"] == 1
    api.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "tieredtopics", "payments", {"spec": {"paused": True}}
    )
    current = api.get_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", "payments")
    assert current["metadata"]["generation"] == 2


def test_a_new_object_reads_as_not_yet_observed_until_the_operator_writes(
    k8s_crds: ControlPlane, kube_client: Any, k8s_namespace: str
) -> None:
    """The CRDs default ``status`` to ``observedGeneration: 0``: before any operator wrote a status, kstatus
    (the real library) says InProgress, not Current as it would for an object with no status at all."""
    api = kubernetes.client.CustomObjectsApi(kube_client)
    ns = k8s_namespace
    created = api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", example_topic("fresh"))
    assert created["status"] == {"observedGeneration": 0}
    listed = api.list_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics")["items"]
    assert [o["status"] for o in listed if o["metadata"]["name"] == "fresh"] == [{"observedGeneration": 0}]
    (verdict,) = kstatus_live(k8s_crds.kubeconfig, f"{GROUP}/{VERSION}/tieredtopics", ns, "fresh")
    assert verdict.status == "InProgress", verdict
    broker: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "tieredbroker.yaml").read_text())
    broker["metadata"] = {"name": "fresh-broker"}
    made = api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredbrokers", broker)
    assert made["status"] == {"observedGeneration": 0}


def test_the_projects_cel_rules_reject_objects_at_the_api(k8s_crds: ControlPlane, k8s_namespace: str) -> None:
    """The rules of storage_core/api/rules.py, generated into crds/, are enforced by the API server."""
    good = example_topic("within-bounds")
    assert create(k8s_crds, topics_path(k8s_namespace), good)["spec"]["topic"] == "orders"
    longer_locally = example_topic("longer-locally")
    longer_locally["spec"]["localRetentionMs"] = longer_locally["spec"]["remoteRetentionMs"] + 1
    infinite_locally = example_topic("infinite-locally")
    infinite_locally["spec"]["localRetentionMs"] = -1
    for bad in (longer_locally, infinite_locally):
        with pytest.raises(ApiError) as refused:
            create(k8s_crds, topics_path(k8s_namespace), bad)
        assert refused.value.code == 422
        assert "localRetentionMs must not exceed remoteRetentionMs" in refused.value.message
    # Omitted fields are evaluated with the model's defaults (crdgen writes them into the rule).
    schedule_and_interval = example_topic("both")
    schedule_and_interval["spec"]["copy"] = {"intervalSeconds": 60, "schedule": "*/5 * * * *"}
    with pytest.raises(ApiError) as refused:
        create(k8s_crds, topics_path(k8s_namespace), schedule_and_interval)
    assert refused.value.code == 422
    assert "copy.schedule and copy.intervalSeconds are mutually exclusive" in refused.value.message


def test_a_nonsense_trim_hold_is_refused_at_the_api_with_its_reason(
    k8s_crds: ControlPlane, k8s_namespace: str
) -> None:
    """trimHold on a TieredTopic and as a TieredCluster's default: the field types, the CEL rules of
    storage_core/api/trim_hold.py and resources.py, and the list type set, each with its own message."""
    good = example_topic("held")
    good["spec"]["trimHold"] = {"maxAgeMs": 86_400_000, "ignoreGroups": ["connect-*", "audit"]}
    assert create(k8s_crds, topics_path(k8s_namespace), good)["spec"]["trimHold"]["maxAgeMs"] == 86_400_000
    refusals = {
        "negative": ({"maxBytes": -5}, "spec.trimHold.maxBytes"),  # below -1: the schema's minimum
        "zero-age": ({"maxAgeMs": 0}, "trimHold.maxAgeMs and maxBytes must not be 0"),
        "within-window": ({"maxAgeMs": 3_600_000}, "trimHold.maxAgeMs must exceed localRetentionMs"),
        "bounds-disabled": ({"enabled": False, "maxBytes": 1 << 30}, "trimHold bounds need the hold enabled"),
        "star-inside": ({"ignoreGroups": ["connect-*-sink"]}, "* may stand only at the end"),
        "twice": ({"ignoreGroups": ["audit", "audit"]}, 'Duplicate value: "audit"'),
    }
    for name, (hold, message) in refusals.items():
        bad = example_topic(name)
        bad["spec"]["trimHold"] = hold
        with pytest.raises(ApiError) as refused:
            create(k8s_crds, topics_path(k8s_namespace), bad)
        assert refused.value.code == 422, name
        assert message in refused.value.message, (name, refused.value.message)
        if name == "negative":
            assert "greater than or equal to -1" in refused.value.message
    cluster = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TieredCluster",
        "metadata": {"name": "hold-default"},
        "spec": {
            "bootstrapServers": "kafka:9092",
            "remote": {"url": "s3://b/t"},
            "trimHold": {"maxBytes": 0},
        },
    }
    clusters = f"/apis/{GROUP}/{VERSION}/namespaces/{k8s_namespace}/tieredclusters"
    with pytest.raises(ApiError) as refused:
        create(k8s_crds, clusters, cluster)
    assert refused.value.code == 422
    assert "trimHold.maxAgeMs and maxBytes must not be 0" in refused.value.message
    cluster["spec"]["trimHold"] = {"maxBytes": 1 << 30, "inactiveGroupMs": -1}
    assert create(k8s_crds, clusters, cluster)["spec"]["trimHold"]["inactiveGroupMs"] == -1


def test_a_jbod_brokers_log_dirs_are_checked_at_the_api(k8s_crds: ControlPlane, k8s_namespace: str) -> None:
    """extraLogDirs: accepted with a claim and mount of its own each, refused by the CEL rules otherwise."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{k8s_namespace}/tieredbrokers"

    def broker(name: str, extra: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TieredBroker",
            "metadata": {"name": name},
            "spec": {
                "clusterRef": {"name": "c"},
                "brokerId": 4,
                "logDir": {"claimName": "d0", "mountPath": "/k/d0", "path": "/k/d0/kafka-log4"},
                "extraLogDirs": [extra],
            },
        }

    good = broker("jbod", {"claimName": "d1", "mountPath": "/k/d1", "path": "/k/d1/kafka-log4"})
    assert create(k8s_crds, path, good)["spec"]["extraLogDirs"][0]["claimName"] == "d1"
    refusals = {
        "same-mount": (
            {"claimName": "d1", "mountPath": "/k/d0", "path": "/k/d0/other"},
            "every log dir's claim needs a mountPath of its own",
        ),
        "no-claim": ({"path": "/k/d1/kafka-log4"}, "extraLogDirs[].claimName must be set exactly when"),
        "same-path": (
            {"claimName": "d1", "mountPath": "/k", "path": "/k/d0/kafka-log4"},
            "logDir.path and every extraLogDirs[].path must differ",
        ),
    }
    for name, (extra, message) in refusals.items():
        with pytest.raises(ApiError) as refused:
            create(k8s_crds, path, broker(name, extra))
        assert refused.value.code == 422
        assert message in refused.value.message


def test_a_service_account_is_refused_what_its_role_does_not_grant(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    service_account_with_role(
        plane, ns, "lister", "pods", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    )
    token = plane.token_for(ns, "lister")
    assert plane.request("GET", f"/api/v1/namespaces/{ns}/pods", token=token)["items"] == []
    with pytest.raises(ApiError) as refused:
        plane.request("GET", f"/api/v1/namespaces/{ns}/secrets", token=token)
    assert refused.value.code == 403
    assert f"system:serviceaccount:{ns}:lister" in refused.value.message


def test_a_restricted_namespace_rejects_a_violating_pod(k8s_control_plane: ControlPlane) -> None:
    plane = k8s_control_plane
    ns = unique("restricted")
    plane.create_namespace(ns, labels={"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        privileged = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "root"},
            "spec": {
                "containers": [
                    {"name": "main", "image": "python:3.11", "securityContext": {"privileged": True}}
                ]
            },
        }
        with pytest.raises(ApiError) as refused:
            create(plane, f"/api/v1/namespaces/{ns}/pods", privileged)
        assert refused.value.code == 403
        assert 'violates PodSecurity "restricted:latest"' in refused.value.message
        assert "privileged" in refused.value.message
        compliant = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "fine"},
            "spec": {
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 10001,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "main",
                        "image": "tierkeeper",
                        "args": ["--help"],
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }
                ],
            },
        }
        assert create(plane, f"/api/v1/namespaces/{ns}/pods", compliant)["metadata"]["name"] == "fine"
    finally:
        plane.request("DELETE", f"/api/v1/namespaces/{ns}")
