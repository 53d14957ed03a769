"""helm install / upgrade / uninstall of charts/tierkeeper against the real API server: the chart's
Deployment is run by the process kubelet under the chart's ServiceAccount token, so the operator in it
has exactly the chart's RBAC, in a namespace that enforces the `restricted` Pod Security level."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from k8s_helpers import DEADLINE, create, unique, wait_for

from harness.control_plane import ControlPlane
from harness.kube_rest import ApiError
from harness.paths import REPO_ROOT
from harness.ports import free_ports
from harness.tools import run_tool
from tierkeeper_operator import GROUP, VERSION

CHART = REPO_ROOT / "charts" / "tierkeeper"


def helm(plane: ControlPlane, *args: str) -> str:
    return run_tool("helm", ["--kubeconfig", str(plane.kubeconfig), *args], timeout=DEADLINE).stdout


def operator_pods(plane: ControlPlane, namespace: str, release: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance%3D{release}"
    return list(
        plane.request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")["items"]
    )


def running_pod(
    plane: ControlPlane, namespace: str, release: str, *, arg: str | None = None
) -> dict[str, Any]:
    """The release's one pod once it runs (and, with ``arg``, has that argument), with nothing else left."""

    def probe() -> dict[str, Any] | None:
        pods = operator_pods(plane, namespace, release)
        if len(pods) != 1 or pods[0]["status"].get("phase") != "Running":
            return None
        args = pods[0]["spec"]["containers"][0].get("args", [])
        return pods[0] if arg is None or arg in args else None

    pod: dict[str, Any] = wait_for(probe, f"the {release} operator pod to run")
    return pod


def topic_status(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    obj = plane.request("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/tieredtopics/{name}")
    status: dict[str, Any] = obj.get("status") or {}
    return status


def test_helm_install_upgrade_uninstall_runs_the_operator_under_the_chart_rbac(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    plane = k8s_control_plane
    release, ns = unique("tk"), unique("tierkeeper-system")
    plane.create_namespace(ns, labels={"pod-security.kubernetes.io/enforce": "restricted"})
    # The pod shares the host's network: no fixed liveness or metrics port. Nothing listens on the
    # cluster's Kafka port: this test proves the chart (ConfigMap of clusters, RBAC, Pod Security) and the
    # operator's reading of it; test_k8s_operator_real.py reconciles to Ready against a real Kafka.
    port, metrics_port, kafka_port = free_ports(3)
    cluster = {
        "name": "my-cluster",
        "bootstrapServers": f"127.0.0.1:{kafka_port}",
        "remote": {"url": f"file://{tmp_path / 'remote'}"},
    }
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump({"clusters": [cluster], "livenessPort": port, "metricsPort": metrics_port})
    )
    try:
        helm(plane, "install", release, str(CHART), "--namespace", ns, "--values", str(values))
        pod = running_pod(plane, ns, release)
        name = pod["metadata"]["name"]
        account = pod["spec"]["serviceAccountName"]
        assert account == release + "-tierkeeper" or account.startswith(release), account
        # The operator, in the pod, as the chart's ServiceAccount, handles a TieredTopic in another namespace.
        topic: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "tieredtopic.yaml").read_text())
        topic["metadata"] = {"name": "orders"}
        create(plane, f"/apis/{GROUP}/{VERSION}/namespaces/{k8s_namespace}/tieredtopics", topic)
        stalled = wait_until_stalled(plane, k8s_namespace, "orders")
        log = plane.kubelet.logs(ns, name, "operator")
        assert stalled, (
            f"status {topic_status(plane, k8s_namespace, 'orders')}; operator pod log:\n{log[-5000:]}"
        )
        # The operator found the cluster in the chart's ConfigMap and tried its Kafka: a clear one-line
        # reason, not a permission error.
        assert stalled["reason"] == "KafkaUnreachable", stalled
        assert stalled["observedGeneration"] == 1, stalled
        # A 403 reaches the log as kopf's APIForbiddenError / "Forbidden"; a bare "403" would also match
        # librdkafka's millisecond timestamps, which this log is full of (nothing listens on the Kafka port).
        assert "Forbidden" not in log, log[-5000:]
        first_pid = plane.kubelet.pid_of(ns, name, "operator")

        helm(
            plane,
            "upgrade",
            release,
            str(CHART),
            "--namespace",
            ns,
            "--values",
            str(values),
            "--set",
            "verbose=true",
        )
        upgraded = running_pod(plane, ns, release, arg="--verbose")
        assert upgraded["metadata"]["name"] != name
        assert not Path(f"/proc/{first_pid}").exists(), "the old operator process outlived its pod"

        helm(plane, "uninstall", release, "--namespace", ns)
        wait_for(lambda: not operator_pods(plane, ns, release), "the operator pod to be removed")
        second_pid = plane.kubelet.pid_of(ns, upgraded["metadata"]["name"], "operator")
        assert not Path(f"/proc/{second_pid}").exists(), "the operator process outlived the release"
        assert "deployed" not in helm(plane, "list", "--namespace", ns)
    finally:
        try:
            plane.request("DELETE", f"/api/v1/namespaces/{ns}")
        except ApiError:
            pass


def wait_until_stalled(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    """The TieredTopic's Stalled condition once the operator has set it True."""
    from harness.k8s import wait_until

    def probe() -> dict[str, Any] | None:
        conditions = topic_status(plane, namespace, name).get("conditions", [])
        found = next((c for c in conditions if c["type"] == "Stalled" and c["status"] == "True"), None)
        return dict(found) if found else None

    found: dict[str, Any] | None = wait_until(probe, DEADLINE)
    return found
