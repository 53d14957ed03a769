"""helm and kubectl come from the PyPI layer package; the chart lints, renders and asks for little."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.paths import REPO_ROOT
from harness.tools import run_tool

CHART = REPO_ROOT / "charts" / "tierkeeper"
RELEASE_NAMESPACE = "tierkeeper-system"

# Kinds the chart may render, with the API version each must use.
EXPECTED_API_VERSIONS = {
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
    "ServiceAccount": "v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Deployment": "apps/v1",
    "ConfigMap": "v1",
}


def render(*extra: str) -> list[dict[str, Any]]:
    out = run_tool(
        "helm", ["template", "tk", str(CHART), "--namespace", RELEASE_NAMESPACE, "--include-crds", *extra]
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def only(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [doc for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} documents"
    return found[0]


def test_helm_is_version_4() -> None:
    out = run_tool("helm", ["version", "--short"]).stdout.strip()
    assert re.fullmatch(r"v4\.\d+\.\d+(\+\w+)?", out), out


def test_kubectl_client_runs() -> None:
    out = run_tool("kubectl", ["version", "--client", "--output=yaml"]).stdout
    client = yaml.safe_load(out)["clientVersion"]
    assert client["major"] == "1"
    assert int(client["minor"]) >= 33


def test_helm_lint_passes() -> None:
    proc = run_tool("helm", ["lint", "--strict", str(CHART)])
    assert "0 chart(s) failed" in proc.stdout


def test_rendered_kinds_and_api_versions() -> None:
    docs = render()
    kinds = sorted(doc["kind"] for doc in docs)
    assert kinds == sorted(
        [
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
        ]
    )
    for doc in docs:
        assert doc["apiVersion"] == EXPECTED_API_VERSIONS[doc["kind"]], doc["kind"]
        assert doc["metadata"]["name"]


def test_chart_installs_exactly_the_repository_crds() -> None:
    rendered = {doc["metadata"]["name"]: doc for doc in render() if doc["kind"] == "CustomResourceDefinition"}
    on_disk = {
        doc["metadata"]["name"]: doc
        for doc in (yaml.safe_load(path.read_text()) for path in sorted((REPO_ROOT / "crds").glob("*.yaml")))
    }
    assert rendered == on_disk


def test_deployment_runs_non_root_on_a_read_only_root() -> None:
    deployment = only(render(), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {mount["mountPath"] for mount in container["volumeMounts"]} == {"/tmp", "/etc/tierkeeper/clusters"}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    sa = only(render(), "ServiceAccount")["metadata"]["name"]
    assert pod["serviceAccountName"] == sa


def test_image_and_arguments_come_from_values() -> None:
    deployment = only(
        render(
            "--set",
            "image.repository=registry.example/tk",
            "--set",
            "image.tag=1.2.3",
            "--set",
            "watchNamespaces={kafka,streams}",
        ),
        "Deployment",
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/tk:1.2.3"
    assert container["args"][:3] == ["operator", "--namespace=kafka", "--namespace=streams"]
    default = only(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert default["image"].endswith(f":{chart['appVersion']}")
    assert "--all-namespaces" in default["args"]
    port = default["ports"][0]["containerPort"]
    assert f"--liveness=http://0.0.0.0:{port}/healthz" in default["args"]


def test_cluster_role_is_least_privilege() -> None:
    rules = only(render(), "ClusterRole")["rules"]
    grants = {
        (group, resource): set(rule["verbs"])
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    for (group, resource), verbs in grants.items():
        assert "*" not in verbs and group != "*" and resource != "*", (group, resource)
    assert grants[("tierkeeper.io", "tieredtopics")] == {"get", "list", "watch", "patch"}
    assert grants[("tierkeeper.io", "tieredtopics/status")] == {"get", "patch"}
    assert grants[("tierkeeper.io", "tieredbrokers/status")] == {"get", "patch"}
    assert grants[("", "events")] == {"create"}
    assert grants[("batch", "jobs")] == {"get", "list", "watch", "create", "patch"}
    assert grants[("", "pods")] <= {"get", "list", "watch"}
    assert grants[("", "configmaps")] == {"get", "create", "patch"}  # the rebuild settings
    assert ("", "secrets") not in grants  # Jobs name Secrets; the operator never reads them
    binding = only(render(), "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == only(render(), "ClusterRole")["metadata"]["name"]
    assert binding["subjects"][0]["namespace"] == RELEASE_NAMESPACE


def test_rbac_and_service_account_can_be_disabled() -> None:
    kinds = {
        doc["kind"]
        for doc in render(
            "--set",
            "rbac.create=false",
            "--set",
            "serviceAccount.create=false",
            "--set",
            "serviceAccount.name=existing",
        )
    }
    assert kinds == {"CustomResourceDefinition", "Deployment", "ConfigMap"}


@pytest.mark.parametrize("path", sorted((CHART / "templates").glob("*.yaml")), ids=lambda p: p.name)
def test_templates_use_release_namespace_for_namespaced_objects(path: Path) -> None:
    text = path.read_text()
    if "kind: ServiceAccount" in text or "kind: Deployment" in text:
        assert "namespace: {{ .Release.Namespace }}" in text


def test_clusters_become_a_config_map_the_operator_reads() -> None:
    cluster = yaml.safe_load((REPO_ROOT / "examples" / "cluster.yaml").read_text())
    values = REPO_ROOT / ".pytest-values.yaml"
    values.write_text(yaml.safe_dump({"clusters": [cluster]}))
    try:
        docs = render("--values", str(values))
    finally:
        values.unlink()
    config_map = only(docs, "ConfigMap")
    assert yaml.safe_load(config_map["data"]["my-cluster.yaml"]) == cluster
    container = only(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--cluster=/etc/tierkeeper/clusters/my-cluster.yaml" in container["args"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "clusters")
    assert mount["mountPath"] == "/etc/tierkeeper/clusters" and mount["readOnly"] is True
