"""One-shot actions that survive GitOps, on the real API server: a rebuild asked for with
``spec.rebuild.requestId`` runs once per id, however often the same manifest is applied again (Argo CD's
selfHeal, every Flux interval), and the id is recorded in ``status.requests``; the kubectl annotation
``tierkeeper.io/rebuild=run`` keeps working. (Fetcher commands by ``spec.replicaFetchers.request`` are in
test_k8s_fetchers_operator.py, which has the Kafka brokers they need.)

The rebuild Jobs' pods are pinned to a node that does not exist, so none of them ever runs: what is
checked is whether the operator creates a Job.
"""

from __future__ import annotations

from typing import Any

from test_k8s_operator_real import chart_rbac, resource

from harness.control_plane import ControlPlane
from harness.k8s import load_crds, wait_until
from harness.ports import free_ports
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.reconcile.rebuild import REQUEST_ANNOTATION
from tierkeeper_operator.compose import build_reconciler
from tierkeeper_operator.kube import Kube

API = "/apis/tierkeeper.io/v1alpha1"


def test_a_rebuild_request_id_runs_once_however_often_the_manifest_is_applied(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    plane.apply_crds(load_crds())
    (port,) = free_ports(1)  # no Kafka: the rebuild part of a round does not need it
    cluster = KafkaClusterConfig.model_validate(
        {"name": "c", "bootstrapServers": f"127.0.0.1:{port}", "remote": {"url": "file:///unused"}}
    )
    reconciler = build_reconciler(Kube(plane.api_client(token=chart_rbac(plane, ns)), (ns,)), {"c": cluster})
    path = f"{API}/namespaces/{ns}/tieredbrokers/broker-0"
    jobs_path = f"/apis/batch/v1/namespaces/{ns}/jobs"

    def manifest(request_id: str) -> dict[str, Any]:
        """The TieredBroker as kept in Git."""
        return resource(
            "TieredBroker",
            "broker-0",
            {
                "clusterRef": {"name": "c"},
                "brokerId": 0,
                "logDir": {"claimName": "data-0", "path": "/var/lib/kafka/data"},
                "placement": {"nodeName": "no-such-node"},
                "rebuild": {"requestId": request_id},
            },
        )

    def apply(obj: dict[str, Any]) -> None:
        """What Argo CD and Flux do on every sync: server-side apply of the manifest from Git."""
        plane.rest().call(
            "PATCH",
            f"{path}?fieldManager=gitops&force=true",
            obj,
            content_type="application/apply-patch+yaml",
        )

    def rebuild_jobs() -> list[str]:
        return sorted(j["metadata"]["name"] for j in plane.request("GET", jobs_path)["items"])

    def forget_jobs() -> None:
        """The Job ran and went (its TTL): only the request can bring a new one."""
        for name in rebuild_jobs():
            plane.rest().call("DELETE", f"{jobs_path}/{name}", {"propagationPolicy": "Background"})
        # Gone from the list the operator reads, or a Job still listed would hide a repeated request.
        assert wait_until(lambda: not plane.request("GET", jobs_path)["items"], 30), rebuild_jobs()

    def requests() -> dict[str, Any]:
        return dict((plane.request("GET", path).get("status") or {}).get("requests") or {})

    apply(manifest("2026-11-26-a"))
    first = reconciler.run_round().created
    assert len(first) == 1 and first == rebuild_jobs(), first
    assert requests() == {"rebuild": "2026-11-26-a"}
    forget_jobs()

    # selfHeal / the next Flux interval: the same manifest again, round after round. No new Job.
    for _ in range(3):
        apply(manifest("2026-11-26-a"))
        assert reconciler.run_round().created == []
    assert rebuild_jobs() == []

    # A new id in Git asks again, once.
    apply(manifest("2026-11-26-b"))
    second = reconciler.run_round().created
    assert len(second) == 1 and requests() == {"rebuild": "2026-11-26-b"}
    forget_jobs()
    apply(manifest("2026-11-26-b"))
    assert reconciler.run_round().created == []

    # kubectl users: the annotation works as before and is removed once acted on.
    plane.rest().call(
        "PATCH",
        path,
        {"metadata": {"annotations": {REQUEST_ANNOTATION: "run"}}},
        content_type="application/merge-patch+json",
    )
    third = reconciler.run_round().created
    assert len(third) == 1
    assert REQUEST_ANNOTATION not in (plane.request("GET", path)["metadata"].get("annotations") or {})
    assert requests() == {"rebuild": "2026-11-26-b"}
