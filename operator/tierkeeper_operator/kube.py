"""The operator's adapter to the Kubernetes API: plain JSON over the official client's ApiClient.

Only what the reconcile loop needs. API errors become :class:`KubeError` with the status code, so the loop
can tell "already exists" (a Job of this round was created before a restart) from real failures.
"""

from __future__ import annotations

import datetime
import json
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from storage_core.api import GROUP, VERSION

LIST_PAGE = 500
"""Objects per list request."""
_BULKY_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
FIELD_MANAGER = "tierkeeper-operator"
"""The operator's field manager in server-side apply (the objects it keeps for TieredClusters)."""
OBJECT_PATHS: dict[tuple[str, str], str] = {
    ("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments",
    ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
    ("policy/v1", "PodDisruptionBudget"): "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    ("networking.k8s.io/v1", "NetworkPolicy"): "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    (
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
    ): "/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors",
    (f"{GROUP}/{VERSION}", "TieredBroker"): f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/tieredbrokers",
}
"""The kinds :meth:`Kube.apply_object` and :meth:`Kube.delete_object` handle (each granted in rbac.py)."""


def object_path(api_version: str, kind: str, namespace: str) -> str:
    """The collection path of a kind of :data:`OBJECT_PATHS` in ``namespace``."""
    try:
        return OBJECT_PATHS[(api_version, kind)].format(ns=namespace)
    except KeyError:
        raise ValueError(f"{api_version} {kind} is not a kind the operator keeps") from None


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without what no round reads and what makes up most of a listed object's size: the
    server's ``managedFields`` (field ownership, often larger than spec and status together) and
    kubectl's copy of the last applied manifest. Changes and returns ``obj``."""
    meta = obj.get("metadata") or {}
    meta.pop("managedFields", None)
    annotations = meta.get("annotations")
    if annotations:
        for key in _BULKY_ANNOTATIONS:
            annotations.pop(key, None)
    return obj


def log_ref(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``extra=`` of a log line about ``obj``: kopf's formatters put it under the JSON line's ``object``
    (``--log-format json``) or before the text, as they do for kopf's own per-object lines."""
    meta = obj.get("metadata") or {}
    keys = ("namespace", "name", "uid")
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), **{k: meta.get(k) for k in keys}}
    return {"k8s_ref": {key: value for key, value in ref.items() if value}}


class KubeError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")


class Kube:
    """A thin client; ``api_client`` is a ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any, namespaces: tuple[str, ...] = ()) -> None:
        self._client = api_client
        self.namespaces = namespaces
        """Namespaces to look at; empty means all."""

    def _call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            response = self._client.call_api(
                path,
                method,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
            )
        except ApiException as exc:
            raise KubeError(method, path, int(exc.status or 0), str(exc.body or exc.reason)) from None
        data = response.data
        return json.loads(data) if data else None

    def _get_or_none(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, None when it does not exist (404); any other failure raises."""
        try:
            body: dict[str, Any] = self._call("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return body

    def _scopes(self) -> list[str]:
        return [f"/namespaces/{ns}" for ns in self.namespaces] or [""]

    def list_resources(self, plural: str, page_size: int = LIST_PAGE) -> list[dict[str, Any]]:
        """Every object of ``plural`` in the watched namespaces, slimmed (:func:`slim`).

        Read ``page_size`` objects a request (``limit``/``continue``): a page's JSON text and its parsed
        form are dropped as soon as its objects are slimmed, so 10,000 TieredTopics never sit in memory
        as one 16 MB answer plus its parse (the API server, too, builds one page at a time).
        """
        out: list[dict[str, Any]] = []
        for scope in self._scopes():
            token = ""
            while True:
                query = {"limit": str(page_size), **({"continue": token} if token else {})}
                path = f"/apis/{GROUP}/{VERSION}{scope}/{plural}?{urllib.parse.urlencode(query)}"
                page = self._call("GET", path)
                out += [slim(item) for item in page["items"]]
                token = (page.get("metadata") or {}).get("continue") or ""
                if not token:
                    break
        return out

    @staticmethod
    def _scope(namespace: str | None) -> str:
        return "" if namespace is None else f"/namespaces/{namespace}"

    def collection_version(self, plural: str, namespace: str | None) -> str:
        """The resourceVersion of ``plural`` as it is now, for a watch of what happens from here on (a
        one-object page: listing the whole collection for its version would cost as much as a round).
        ``namespace`` None: all namespaces."""
        page = self._call("GET", f"/apis/{GROUP}/{VERSION}{self._scope(namespace)}/{plural}?limit=1")
        return str(page["metadata"]["resourceVersion"])

    def watch(
        self, plural: str, namespace: str | None, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """The watch events (``{"type": ..., "object": ...}``) of ``plural`` after ``resource_version``,
        bookmarks included, until the API server ends the request after ``timeout_seconds``."""
        from kubernetes.client.exceptions import ApiException

        query = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        path = f"/apis/{GROUP}/{VERSION}{self._scope(namespace)}/{plural}?{urllib.parse.urlencode(query)}"
        try:
            response = self._client.call_api(
                path,
                "GET",
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                # The server ends the request after timeout_seconds; a read that waits much longer
                # means a dead connection, which a fresh watch replaces.
                _request_timeout=(30, timeout_seconds + 30),
            )
        except ApiException as exc:
            raise KubeError("GET", path, int(exc.status or 0), str(exc.body or exc.reason)) from None
        try:
            pending = b""
            for chunk in response.stream(amt=None, decode_content=True):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()

    def patch_status(self, plural: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}/{name}/status"
        self._call("PATCH", path, {"status": status}, "application/merge-patch+json")

    def set_finalizers(self, plural: str, obj: Mapping[str, Any], finalizers: list[str]) -> None:
        """Replace the object's finalizers; the resourceVersion makes a concurrent change fail (409)."""
        meta = obj["metadata"]
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
        self._call("PATCH", path, body, "application/merge-patch+json")

    def list_jobs(self, selector: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"labelSelector": selector})
        out: list[dict[str, Any]] = []
        for scope in self._scopes():
            out += self._call("GET", f"/apis/batch/v1{scope}/jobs?{query}")["items"]
        return out

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"labelSelector": f"job-name={job}"})
        items: list[dict[str, Any]] = self._call("GET", f"/api/v1/namespaces/{namespace}/pods?{query}")[
            "items"
        ]
        return items

    def create_job(self, job: Mapping[str, Any]) -> bool:
        """Create ``job``; False when a Job of that name exists already (created before a restart)."""
        namespace = job["metadata"]["namespace"]
        try:
            self._call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", dict(job))
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def annotate_job(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        self._call(
            "PATCH",
            f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
            body,
            "application/merge-patch+json",
        )

    def list_pods(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        return items

    def apply_config_map(
        self, namespace: str, name: str, labels: Mapping[str, str], data: Mapping[str, str]
    ) -> bool:
        """Make the ConfigMap hold ``data`` (created, or its data replaced); True when it changed."""
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        try:
            current = self._call("GET", f"{path}/{name}")
        except KubeError as exc:
            if exc.status != 404:
                raise
            body = {"metadata": {"name": name, "labels": dict(labels)}, "data": dict(data)}
            self._call("POST", path, body)
            return True
        if (current.get("data") or {}) == dict(data):
            return False
        body = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "data": dict(data)}
        self._call("PATCH", f"{path}/{name}", body, "application/merge-patch+json")
        return True

    def remove_annotation(self, plural: str, obj: Mapping[str, Any], key: str) -> None:
        """Drop one annotation (a command such as ``tierkeeper.io/fetchers: approve``) once acted on."""
        meta = obj["metadata"]
        body = {"metadata": {"annotations": {key: None}}}
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
        self._call("PATCH", path, body, "application/merge-patch+json")

    def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        """The decoded keys of one Secret, read by name (RBAC: ``get`` on exactly the Secrets TieredClusters
        name as clientConfigSecretRef; never list or watch). For the operator's own Kafka clients only:
        the values go into a client's configuration and nowhere else (no log line, status or event)."""
        import base64

        secret = self._call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
        out = {}
        for key, value in (secret.get("data") or {}).items():
            out[str(key)] = base64.b64decode(value).decode("utf-8").removesuffix("\n").removesuffix("\r")
        return out

    def pod_node(self, namespace: str, name: str) -> str | None:
        pod = self._get_or_none(f"/api/v1/namespaces/{namespace}/pods/{name}")
        if pod is None:
            return None
        node = pod.get("spec", {}).get("nodeName")
        return str(node) if node else None

    def event(
        self, involved: Mapping[str, Any], kind: str, type_: str, reason: str, message: str, component: str
    ) -> None:
        meta = involved["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": "tierkeeper-", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", f"{GROUP}/{VERSION}"),
                "kind": kind,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": component},
            "reportingComponent": component,
        }
        self._call("POST", f"/api/v1/namespaces/{meta['namespace']}/events", body)

    # ---- objects the operator keeps for a TieredCluster (the gateway, Strimzi's TieredBrokers) -------
    def apply_object(self, obj: Mapping[str, Any]) -> None:
        """Make ``obj`` (a full manifest of a kind in :data:`OBJECT_PATHS`) exist as given: server-side
        apply as the operator's field manager, forced (the operator owns these objects), so a field
        dropped from the manifest (a Service port of a broker gone) is removed and an object missing is
        created. The API server authorizes the apply of a missing object as ``create`` as well."""
        meta = obj["metadata"]
        path = f"{object_path(str(obj['apiVersion']), str(obj['kind']), meta['namespace'])}/{meta['name']}"
        query = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER, "force": "true"})
        # The client sends the manifest as JSON, which the apply content type (YAML) takes as it is.
        self._call("PATCH", f"{path}?{query}", dict(obj), "application/apply-patch+yaml")

    def delete_object(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete one such object; False when it did not exist (or its kind is not served)."""
        try:
            self._call("DELETE", f"{object_path(api_version, kind, namespace)}/{name}")
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment (the gateway's, for its ready replicas), None when missing."""
        return self._get_or_none(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")

    def get_strimzi_kafka(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Strimzi ``Kafka`` a TieredCluster's spec.strimzi names, None when missing."""
        from tierkeeper_operator.strimzi_brokers import STRIMZI_GROUP, STRIMZI_VERSION

        body = self._get_or_none(
            f"/apis/{STRIMZI_GROUP}/{STRIMZI_VERSION}/namespaces/{namespace}/kafkas/{name}"
        )
        return None if body is None else slim(body)

    def list_strimzi_node_pools(self, namespace: str, kafka: str) -> list[dict[str, Any]]:
        """The ``KafkaNodePool``\\ s of one Strimzi cluster (label ``strimzi.io/cluster``)."""
        from tierkeeper_operator.strimzi_brokers import STRIMZI_GROUP, STRIMZI_VERSION, node_pool_selector

        query = urllib.parse.urlencode({"labelSelector": node_pool_selector(kafka)})
        path = f"/apis/{STRIMZI_GROUP}/{STRIMZI_VERSION}/namespaces/{namespace}/kafkanodepools?{query}"
        return [slim(item) for item in self._call("GET", path)["items"]]

    def list_strimzi_broker_pods(self, namespace: str, kafka: str) -> list[dict[str, Any]]:
        """The broker pods of one Strimzi cluster (their claims and mount paths)."""
        from tierkeeper_operator.strimzi_brokers import broker_pod_selector

        query = urllib.parse.urlencode({"labelSelector": broker_pod_selector(kafka)})
        items = self._call("GET", f"/api/v1/namespaces/{namespace}/pods?{query}")["items"]
        return [slim(item) for item in items]

    # ---- kopf peering -----------------------------------------------------------------------------
    @staticmethod
    def _peering_path(namespace: str | None, name: str | None = None) -> str:
        from tierkeeper_operator.peering import PEERING_GROUP, PEERING_VERSION

        base = f"/apis/{PEERING_GROUP}/{PEERING_VERSION}"
        scope = f"{base}/namespaces/{namespace}/kopfpeerings" if namespace else f"{base}/clusterkopfpeerings"
        return f"{scope}/{name}" if name else scope

    def get_peering(self, name: str, namespace: str | None) -> dict[str, Any] | None:
        """The KopfPeering (namespaced) or ClusterKopfPeering (``namespace`` None); None when missing."""
        return self._get_or_none(self._peering_path(namespace, name))

    def ensure_peering(self, name: str, namespace: str | None) -> None:
        """Create the peering object unless it exists (kopf only patches it)."""
        from tierkeeper_operator.peering import PEERING_GROUP, PEERING_VERSION

        kind = "KopfPeering" if namespace else "ClusterKopfPeering"
        metadata: dict[str, Any] = {"name": name}
        if namespace:
            metadata["namespace"] = namespace
        body = {"apiVersion": f"{PEERING_GROUP}/{PEERING_VERSION}", "kind": kind, "metadata": metadata}
        try:
            self._call("POST", self._peering_path(namespace), body)
        except KubeError as exc:
            if exc.status != 409:
                raise
