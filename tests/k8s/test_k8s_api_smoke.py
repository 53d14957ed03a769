"""The emulated Kubernetes API is real enough: custom objects can be created, patched, watched and listed
with the official client, and discovery serves our CRDs."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes
import yaml

from harness.k8s import KubeApiServer
from harness.paths import REPO_ROOT
from tierkeeper_operator import GROUP, VERSION

NAMESPACE = "default"


def example_topic(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "tieredtopic.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": NAMESPACE}
    return doc


def test_discovery_serves_our_resources(kube_client: Any) -> None:
    resources = kubernetes.client.CustomObjectsApi(kube_client).get_api_resources(GROUP, VERSION)
    by_name = {resource.name: resource for resource in resources.resources}
    assert by_name["tieredtopics"].kind == "TieredTopic"
    assert by_name["tieredtopics"].namespaced is True
    assert "tieredtopics/status" in by_name and "tieredbrokers/status" in by_name
    crds = kubernetes.client.ApiextensionsV1Api(kube_client).list_custom_resource_definition()
    assert sorted(crd.metadata.name for crd in crds.items) == [
        "tieredbrokers.tierkeeper.io",
        "tieredtopics.tierkeeper.io",
    ]


def test_create_patch_and_watch_a_tieredtopic(kube_client: Any) -> None:
    api = kubernetes.client.CustomObjectsApi(kube_client)
    created = api.create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "tieredtopics", example_topic("orders")
    )
    assert created["metadata"]["generation"] == 1
    assert created["metadata"]["uid"]

    watch = kubernetes.watch.Watch()
    seen: list[tuple[str, dict[str, Any]]] = []
    for event in watch.stream(
        api.list_namespaced_custom_object, GROUP, VERSION, NAMESPACE, "tieredtopics", timeout_seconds=30
    ):
        seen.append((event["type"], copy.deepcopy(event["object"])))
        if event["type"] == "ADDED":
            api.patch_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, "tieredtopics", "orders", {"spec": {"paused": True}}
            )
        if event["type"] == "MODIFIED":
            watch.stop()
    assert [kind for kind, _ in seen] == ["ADDED", "MODIFIED"]
    modified = seen[-1][1]
    assert modified["spec"]["paused"] is True
    assert modified["spec"]["topic"] == "orders"  # a merge patch keeps the other fields
    assert modified["metadata"]["generation"] == 2


def test_status_subresource_is_separate_from_the_spec(kube_client: Any) -> None:
    api = kubernetes.client.CustomObjectsApi(kube_client)
    api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "tieredtopics", example_topic("payments"))
    # As on a real server: status sent to the main resource is dropped, spec sent to /status is dropped.
    api.patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "tieredtopics", "payments", {"status": {"phase": "Accepted"}}
    )
    api.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        NAMESPACE,
        "tieredtopics",
        "payments",
        {"status": {"phase": "Invalid"}, "spec": {"paused": True}},
    )
    current = api.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "tieredtopics", "payments")
    assert current["status"] == {"phase": "Invalid"}
    assert current["spec"]["paused"] is False
    assert current["metadata"]["generation"] == 1


def test_list_and_delete(kube_client: Any, kube_api: KubeApiServer) -> None:
    api = kubernetes.client.CustomObjectsApi(kube_client)
    for name in ("a", "b"):
        api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "tieredtopics", example_topic(name))
    listed = api.list_cluster_custom_object(GROUP, VERSION, "tieredtopics")["items"]
    assert sorted(item["metadata"]["name"] for item in listed) == ["a", "b"]
    api.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "tieredtopics", "a")
    remaining = api.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "tieredtopics")["items"]
    assert [item["metadata"]["name"] for item in remaining] == ["b"]
    assert kube_api.url.startswith("http://127.0.0.1:")
