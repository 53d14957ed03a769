"""The operator's RBAC is exactly what its code calls, both ways.

Every public method of the Kubernetes adapter (``tierkeeper_operator.kube.Kube``) runs against a recording
API client; the (verb, group, resource) of each request it makes must be granted by
``tierkeeper_operator.rbac.KUBE_GRANTS``, and every grant there must be used by some call. A new method
fails here until it is exercised below and its grant declared (then `make chart` regenerates the chart's
rules, which test_k8s_chart.py compares with the same list). kopf's own needs are ``KOPF_GRANTS``;
test_k8s_helm.py runs the operator under the chart's rules on the real API server and compares the
requests of the API server's audit log with them, both ways.
"""

from __future__ import annotations

import inspect
import json
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from harness.control_plane import ControlPlane
from harness.k8s import wait_until
from harness.kube_rest import ApiError
from tierkeeper_operator import rbac
from tierkeeper_operator.kube import OBJECT_PATHS, Kube

OBJ = {
    "apiVersion": "tierkeeper.io/v1alpha1",
    "metadata": {"name": "n", "namespace": "ns", "resourceVersion": "1", "uid": "u"},
}
JOB = {"metadata": {"name": "j", "namespace": "ns"}}
APPLY = "application/apply-patch+yaml"


def _keptobj(api_version: str, kind: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "n", "namespace": "ns"}}


# How to call each public method of Kube (with the plural it is called with in the operator).
CALLS: dict[str, list[Callable[[Kube], Any]]] = {
    "list_resources": [
        lambda k: k.list_resources("tieredtopics"),
        lambda k: k.list_resources("tieredbrokers"),
        lambda k: k.list_resources("tieredclusters"),
    ],
    "patch_status": [
        lambda k: k.patch_status("tieredtopics", "ns", "n", {}),
        lambda k: k.patch_status("tieredbrokers", "ns", "n", {}),
        lambda k: k.patch_status("tieredclusters", "ns", "n", {}),
    ],
    "set_finalizers": [
        lambda k: k.set_finalizers("tieredtopics", OBJ, []),
        lambda k: k.set_finalizers("tieredclusters", OBJ, []),
    ],
    # Granted by name only (Grant.named: the chart's Role with resourceNames).
    "secret_data": [lambda k: k.secret_data("ns", "kafka-client")],
    "list_jobs": [lambda k: k.list_jobs("a=b")],
    "job_pods": [lambda k: k.job_pods("ns", "j")],
    "create_job": [lambda k: k.create_job(JOB)],
    "annotate_job": [lambda k: k.annotate_job("ns", "j", {"a": "b"})],
    "pod_node": [lambda k: k.pod_node("ns", "p")],
    "list_pods": [lambda k: k.list_pods("ns")],
    # "missing" answers 404 (created); an existing one with other data is patched.
    "apply_config_map": [
        lambda k: k.apply_config_map("ns", "missing", {}, {"k": "v"}),
        lambda k: k.apply_config_map("ns", "present", {}, {"k": "v"}),
    ],
    "remove_annotation": [lambda k: k.remove_annotation("tieredbrokers", OBJ, "tierkeeper.io/fetchers")],
    # As SpecWatch calls them: per watched namespace, or for all (None) watching all namespaces.
    "collection_version": [
        lambda k, plural=plural: k.collection_version(plural, k.namespaces[0] if k.namespaces else None)
        for plural in ("tieredtopics", "tieredclusters")
    ],
    "watch": [
        lambda k, plural=plural: list(k.watch(plural, k.namespaces[0] if k.namespaces else None, "1", 5))
        for plural in ("tieredtopics", "tieredclusters")
    ],
    "event": [lambda k: k.event(OBJ, "TieredTopic", "Normal", "R", "m", "c")],
    # As the peering gate calls them: per watched namespace, or cluster-wide (None) watching all.
    "get_peering": [lambda k: k.get_peering("tierkeeper", k.namespaces[0] if k.namespaces else None)],
    "ensure_peering": [lambda k: k.ensure_peering("tierkeeper", k.namespaces[0] if k.namespaces else None)],
    # Every kind a TieredCluster's gateway has, and the TieredBrokers kept for a Strimzi cluster.
    "apply_object": [lambda k, kind=kind: k.apply_object(_keptobj(*kind)) for kind in OBJECT_PATHS],
    "delete_object": [lambda k, kind=kind: k.delete_object(*kind, "ns", "n") for kind in OBJECT_PATHS],
    "get_deployment": [lambda k: k.get_deployment("ns", "gw")],
    "get_strimzi_kafka": [lambda k: k.get_strimzi_kafka("ns", "my-cluster")],
    "list_strimzi_node_pools": [lambda k: k.list_strimzi_node_pools("ns", "my-cluster")],
    "list_strimzi_broker_pods": [lambda k: k.list_strimzi_broker_pods("ns", "my-cluster")],
}


@dataclass
class Response:
    data: bytes

    def stream(self, amt: int | None = None, decode_content: bool = True) -> Any:
        yield self.data + b"\n"  # a watch answer: one event a line

    def release_conn(self) -> None:
        pass


@dataclass
class RecordingClient:
    """Stands in for ``kubernetes.client.ApiClient``: records each request, answers an empty object."""

    requests: list[tuple[str, str]] = field(default_factory=list)

    def call_api(self, path: str, method: str, **kwargs: Any) -> Response:
        from kubernetes.client.exceptions import ApiException

        self.requests.append((method, path))
        if (kwargs.get("header_params") or {}).get("Content-Type") == APPLY:
            # A server-side apply creates the object when it is missing: authorized as create then.
            self.requests.append(("POST", path))
        if method == "GET" and path.endswith("/missing"):
            raise ApiException(status=404, reason="Not Found")
        return Response(json.dumps({"items": [], "metadata": {"resourceVersion": "1"}, "spec": {}}).encode())


def permission(method: str, path: str) -> tuple[str, str, str]:
    """(verb, group, resource[/subresource]) an API server authorizes a request as."""
    parsed = urllib.parse.urlsplit(path)
    parts = parsed.path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource, named = rest[0], len(rest) > 1
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    watch = "watch=true" in parsed.query or "watch=1" in parsed.query
    verb = {
        "GET": "watch" if watch else ("get" if named else "list"),
        "POST": "create",
        "PATCH": "patch",
        "PUT": "update",
        "DELETE": "delete" if named else "deletecollection",
    }[method]
    return verb, group, resource


def recorded(namespaces: tuple[str, ...]) -> dict[str, set[tuple[str, str, str]]]:
    out = {}
    for name, calls in CALLS.items():
        client = RecordingClient()
        kube = Kube(client, namespaces)
        for call in calls:
            call(kube)
        out[name] = {permission(method, path) for method, path in client.requests}
    return out


def test_every_public_method_of_the_adapter_is_exercised() -> None:
    public = {name for name, _ in inspect.getmembers(Kube, inspect.isfunction) if not name.startswith("_")}
    missing = public - CALLS.keys()
    assert not missing, (
        f"Kube.{sorted(missing)} make calls this test does not record: add them to CALLS and declare their "
        "grants in tierkeeper_operator/rbac.py (then `make chart`)"
    )


@pytest.mark.parametrize("namespaces", [(), ("a", "b")], ids=["all-namespaces", "namespaced"])
def test_calls_and_declared_grants_match_both_ways(namespaces: tuple[str, ...]) -> None:
    calls = recorded(namespaces)
    used = {perm for perms in calls.values() for perm in perms}
    granted = {
        (verb, group, resource)
        for (group, resource), verbs in rbac.merged(
            rbac.KUBE_GRANTS, clusterwide=not namespaces, named=True
        ).items()
        for verb in verbs
    }
    for method, perms in calls.items():
        assert perms, f"Kube.{method} made no request"
        assert perms <= granted, f"Kube.{method} calls {sorted(perms - granted)}, not in rbac.KUBE_GRANTS"
    assert granted <= used, f"rbac.KUBE_GRANTS grants {sorted(granted - used)} that no Kube call uses"


def test_kopf_grants_cover_what_kopf_does_with_our_resources() -> None:
    kopf = rbac.merged(rbac.KOPF_GRANTS, clusterwide=True)
    # kopf lists then watches TieredBrokers, patches annotations/finalizers and the status subresource.
    assert set(kopf[("tierkeeper.io", "tieredbrokers")]) == {"list", "watch", "patch"}
    assert kopf[("tierkeeper.io", "tieredbrokers/status")] == ("patch",)
    # TieredTopics have no kopf handler: only the operator's own calls (KUBE_GRANTS) touch them.
    assert ("tierkeeper.io", "tieredtopics") not in kopf
    assert kopf[("", "events")] == ("create",)
    namespaced = rbac.merged(rbac.KOPF_GRANTS, clusterwide=False)
    assert ("apiextensions.k8s.io", "customresourcedefinitions") not in namespaced


def test_the_permission_parser_reads_paths_as_the_api_server_does() -> None:
    assert permission("GET", "/apis/batch/v1/jobs?labelSelector=a") == ("list", "batch", "jobs")
    assert permission("GET", "/api/v1/namespaces/ns/pods/p") == ("get", "", "pods")
    assert permission("PATCH", "/apis/g/v1/namespaces/ns/things/t/status") == ("patch", "g", "things/status")
    assert permission("GET", "/apis/g/v1/namespaces/ns/things?watch=true") == ("watch", "g", "things")
    assert permission("POST", "/api/v1/namespaces/ns/events") == ("create", "", "events")


def test_the_audit_log_records_a_service_accounts_requests_and_answers(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    """The harness API server's audit log, which test_k8s_helm.py compares with the chart's RBAC."""
    plane = k8s_control_plane
    token = plane.token_for(k8s_namespace, "default")
    with pytest.raises(ApiError) as refused:
        plane.request("GET", f"/api/v1/namespaces/{k8s_namespace}/secrets", token=token)
    assert refused.value.code == 403

    def recorded_refusal() -> list[dict[str, Any]]:
        return [
            event
            for event in plane.audited(f"system:serviceaccount:{k8s_namespace}:default")
            if (event.get("objectRef") or {}).get("resource") == "secrets"
        ]

    (event,) = wait_until(recorded_refusal, 30) or recorded_refusal()
    assert event["verb"] == "list" and event["responseStatus"]["code"] == 403
    assert event["objectRef"]["namespace"] == k8s_namespace
