"""What only a real API server shows: our CRDs are structural and served, `kubectl explain` reads their
schema, the schema and CEL rules reject objects at admission, status goes through the status
subresource, RBAC refuses what a Role does not grant, and Pod Security Admission enforces `restricted`."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes
import pytest
import yaml
from k8s_helpers import DEADLINE, create, unique

from harness.control_plane import ControlPlane
from harness.k8s import wait_until
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
    for field in ("kafkaCluster", "remote", "localRetentionMs", "remoteRetentionMs", "topic"):
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
        GROUP, VERSION, ns, "tieredtopics", "payments", {"status": {"phase": "X"}}
    )
    api.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        ns,
        "tieredtopics",
        "payments",
        {"status": {"phase": "Invalid"}, "spec": {"paused": True}},
    )
    current = api.get_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", "payments")
    assert current["status"] == {"phase": "Invalid"}
    assert current["spec"]["paused"] is False
    assert current["metadata"]["generation"] == 1
    api.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "tieredtopics", "payments", {"spec": {"paused": True}}
    )
    current = api.get_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", "payments")
    assert current["metadata"]["generation"] == 2


CEL_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "ranges.harness.tierkeeper.io"},
    "spec": {
        "group": "harness.tierkeeper.io",
        "scope": "Namespaced",
        "names": {"plural": "ranges", "singular": "range", "kind": "Range"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"low": {"type": "integer"}, "high": {"type": "integer"}},
                                "x-kubernetes-validations": [
                                    {"rule": "self.low <= self.high", "message": "low must not exceed high"}
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_a_cel_rule_rejects_an_object_at_the_api(k8s_control_plane: ControlPlane, k8s_namespace: str) -> None:
    k8s_control_plane.apply_crds([CEL_CRD])
    path = f"/apis/harness.tierkeeper.io/v1/namespaces/{k8s_namespace}/ranges"
    good = {
        "apiVersion": "harness.tierkeeper.io/v1",
        "kind": "Range",
        "metadata": {"name": "good"},
        "spec": {"low": 1, "high": 2},
    }
    assert create(k8s_control_plane, path, good)["spec"] == {"low": 1, "high": 2}
    bad = copy.deepcopy(good)
    bad["metadata"]["name"] = "bad"
    bad["spec"] = {"low": 5, "high": 2}
    with pytest.raises(ApiError) as refused:
        create(k8s_control_plane, path, bad)
    assert refused.value.code == 422
    assert "low must not exceed high" in refused.value.message


def test_a_service_account_is_refused_what_its_role_does_not_grant(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    create(
        plane,
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "lister"}},
    )
    create(
        plane,
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pods"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
    )
    create(
        plane,
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "lister"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
            "subjects": [{"kind": "ServiceAccount", "name": "lister", "namespace": ns}],
        },
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
