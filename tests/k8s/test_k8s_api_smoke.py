"""The official client against the real API server: our custom objects can be created, patched, watched,
listed and deleted, and discovery serves our CRDs."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes
import yaml

from harness.control_plane import ControlPlane
from harness.paths import REPO_ROOT
from tierkeeper_operator import GROUP, VERSION


def example_topic(name: str, namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "tieredtopic.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    return doc


def test_discovery_serves_our_resources(kube_client: Any) -> None:
    resources = kubernetes.client.CustomObjectsApi(kube_client).get_api_resources(GROUP, VERSION)
    by_name = {resource.name: resource for resource in resources.resources}
    assert by_name["tieredtopics"].kind == "TieredTopic"
    assert by_name["tieredtopics"].namespaced is True
    assert {"tieredtopics/status", "tieredbrokers/status", "tieredclusters/status"} <= set(by_name)
    crds = kubernetes.client.ApiextensionsV1Api(kube_client).list_custom_resource_definition()
    ours = sorted(crd.metadata.name for crd in crds.items if crd.spec.group == GROUP)
    assert ours == [
        "tieredbrokers.tierkeeper.io",
        "tieredclusters.tierkeeper.io",
        "tieredtopics.tierkeeper.io",
    ]


def test_create_patch_and_watch_a_tieredtopic(kube_client: Any, k8s_namespace: str) -> None:
    ns = k8s_namespace
    api = kubernetes.client.CustomObjectsApi(kube_client)
    created = api.create_namespaced_custom_object(
        GROUP, VERSION, ns, "tieredtopics", example_topic("orders", ns)
    )
    assert created["metadata"]["generation"] == 1
    assert created["metadata"]["uid"]

    watch = kubernetes.watch.Watch()
    seen: list[tuple[str, dict[str, Any]]] = []
    for event in watch.stream(
        api.list_namespaced_custom_object, GROUP, VERSION, ns, "tieredtopics", timeout_seconds=30
    ):
        seen.append((event["type"], copy.deepcopy(event["object"])))
        if event["type"] == "ADDED":
            api.patch_namespaced_custom_object(
                GROUP, VERSION, ns, "tieredtopics", "orders", {"spec": {"paused": True}}
            )
        if event["type"] == "MODIFIED":
            watch.stop()
    assert [kind for kind, _ in seen] == ["ADDED", "MODIFIED"]
    modified = seen[-1][1]
    assert modified["spec"]["paused"] is True
    assert modified["spec"]["topic"] == "orders"  # a merge patch keeps the other fields
    assert modified["metadata"]["generation"] == 2


def test_list_and_delete(kube_client: Any, k8s_namespace: str, k8s_control_plane: ControlPlane) -> None:
    ns = k8s_namespace
    api = kubernetes.client.CustomObjectsApi(kube_client)
    for name in ("a", "b"):
        body = example_topic(name, ns)
        api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", body)
    listed = api.list_cluster_custom_object(GROUP, VERSION, "tieredtopics")["items"]
    mine = [item for item in listed if item["metadata"]["namespace"] == ns]
    assert sorted(item["metadata"]["name"] for item in mine) == ["a", "b"]
    api.delete_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", "a")
    remaining = api.list_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics")["items"]
    assert [item["metadata"]["name"] for item in remaining] == ["b"]
    assert k8s_control_plane.url.startswith("https://127.0.0.1:")
