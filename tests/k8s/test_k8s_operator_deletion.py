"""Deleting TieredTopics with ``deletionPolicy: Delete`` when the bucket is unreachable, on the harness's real
control plane, with the operator's rounds running as the chart's ClusterRole: the finalizer holds the object
while the delete cannot succeed, the documented way out (annotation ``tierkeeper.io/skip-remote-deletion``,
docs/operator.md) releases it, and deleting the whole namespace completes, although no delete Job can even
be created in a namespace being terminated."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_helpers import unique, wait_for
from test_k8s_operator_real import chart_rbac, resource

from harness.control_plane import ControlPlane
from harness.kafka import KafkaCluster
from harness.kube_rest import ApiError
from harness.ports import free_ports
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.reconcile.deletion import FINALIZER, SKIP_ANNOTATION
from tierkeeper_operator.compose import build_reconciler
from tierkeeper_operator.jobs import LABEL_KIND
from tierkeeper_operator.kube import Kube

DEADLINE = 180.0
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"  # any 22-character Kafka topic id: the incarnation to delete


def test_unreachable_bucket_holds_deletion_until_skipped_and_namespace_deletion_completes(
    k8s_crds: ControlPlane,
    k8s_namespace: str,
    kafka_broker: KafkaCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    plane = k8s_crds
    work = unique("tk-del")
    plane.create_namespace(work)
    api = f"/apis/tierkeeper.io/v1alpha1/namespaces/{work}/tieredtopics"
    (closed,) = free_ports(1)
    cluster = KafkaClusterConfig.model_validate(
        {
            "name": "local",
            "bootstrapServers": kafka_broker.bootstrap_servers,
            "remote": {  # nothing listens there: the bucket is unreachable
                "url": "s3://unreachable/tier",
                "storageOptions": {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{closed}"}},
            },
            "jobs": {"image": "tierkeeper", "backoffLimit": 0, "activeDeadlineSeconds": 60},
        }
    )
    for name in ("first", "second"):
        spec = {"clusterRef": {"name": "local"}, "topic": f"gone-{name}", "deletionPolicy": "Delete"}
        plane.request("POST", api, resource("TieredTopic", name, spec))
    # The operator's ServiceAccount lives in another namespace, as the chart's does.
    token = chart_rbac(plane, k8s_namespace)
    reconciler = build_reconciler(Kube(plane.api_client(token=token), (work,)), {"local": cluster})
    reconciler.run_round()
    for name in ("first", "second"):
        obj = plane.request("GET", f"{api}/{name}")
        assert FINALIZER in obj["metadata"]["finalizers"], obj["metadata"]
        # As if the topic had been tiered: its incarnation is what a Delete removes.
        plane.rest().call(
            "PATCH",
            f"{api}/{name}/status",
            {"status": {"topicId": TOPIC_ID}},
            content_type="application/merge-patch+json",
        )

    def get(name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = plane.request("GET", f"{api}/{name}")
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise
        return found

    # 1. Deleting one TieredTopic starts a delete Job, which cannot reach the bucket; the object stays.
    plane.request("DELETE", f"{api}/first")

    def delete_job_started() -> list[dict[str, Any]]:
        reconciler.run_round()
        jobs = plane.request("GET", f"/apis/batch/v1/namespaces/{work}/jobs")["items"]
        return [j for j in jobs if j["metadata"]["labels"][LABEL_KIND] == "delete"]

    (job,) = wait_for(delete_job_started, "the delete Job", DEADLINE)
    pods = f"/api/v1/namespaces/{work}/pods?labelSelector=job-name%3D{job['metadata']['name']}"
    wait_for(lambda: plane.request("GET", pods)["items"], "the delete Job's pod", DEADLINE)
    for _ in range(3):  # rounds, not time: the delete has not succeeded, so the finalizer holds
        reconciler.run_round()
    held = get("first")
    assert held is not None and held["metadata"].get("deletionTimestamp"), held
    assert FINALIZER in held["metadata"]["finalizers"]
    # The way out: the annotation releases it, keeping the remote tier for a later manual delete.
    plane.rest().call(
        "PATCH",
        f"{api}/first",
        {"metadata": {"annotations": {SKIP_ANNOTATION: "true"}}},
        content_type="application/merge-patch+json",
    )
    reconciler.run_round()
    wait_for(lambda: get("first") is None, "the skipped TieredTopic to go", DEADLINE)

    # 2. Deleting the namespace: no delete Job can be created in it any more (403), the round goes on,
    # and the skip annotation lets the namespace deletion complete.
    plane.request("DELETE", f"/api/v1/namespaces/{work}")

    def terminating() -> dict[str, Any] | None:
        reconciler.run_round()
        obj = get("second")
        return obj if obj is not None and obj["metadata"].get("deletionTimestamp") else None

    wait_for(terminating, "the namespace controller to delete the TieredTopic", DEADLINE)
    for _ in range(3):
        reconciler.run_round()  # does not raise: the refused Job is reported and the round goes on
    assert "cannot start the delete Job" in caplog.text and "HTTP 403" in caplog.text, caplog.text[-2000:]
    held = get("second")
    assert held is not None and FINALIZER in held["metadata"]["finalizers"]
    namespace = plane.request("GET", f"/api/v1/namespaces/{work}")
    assert namespace["status"]["phase"] == "Terminating"
    plane.rest().call(
        "PATCH",
        f"{api}/second",
        {"metadata": {"annotations": {SKIP_ANNOTATION: "true"}}},
        content_type="application/merge-patch+json",
    )

    def namespace_gone() -> bool:
        reconciler.run_round()
        try:
            plane.request("GET", f"/api/v1/namespaces/{work}")
        except ApiError as exc:
            return exc.code == 404
        return False

    assert wait_for(namespace_gone, "the namespace deletion to complete", DEADLINE)
