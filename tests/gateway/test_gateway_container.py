"""The gateway as the image runs it: `tierkeeper gateway` in a pod of the pipeline image, started by the
harness kubelet in container mode (a real container from `make images`: user 10001, read-only root
filesystem, every capability dropped, only an emptyDir /tmp writable), the tier mounted read-only. A
consumer through it reads every record of the tiered and trimmed topic once, from offset 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.control_plane import ControlPlane
from harness.gateway import free_port_block
from harness.k8s import wait_until
from harness.kafka_dist import HarnessError
from harness.ports import wait_port

from .conftest import Tiered, read_all

DEADLINE = 180.0  # the container's Python start on a busy 2-core machine


def gateway_pod(tiered: Tiered, port: int) -> dict[str, Any]:
    tier = tiered.remote.removeprefix("file://")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gateway"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 10,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "gateway",
                    "image": "tierkeeper/pipeline:0.1.0",
                    "args": [
                        "gateway",
                        "--bootstrap-servers",
                        tiered.cluster.bootstrap_servers,
                        "--remote",
                        tiered.remote,
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--metrics-listen",
                        f"127.0.0.1:{port + 9}",
                    ],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [
                        {"name": "tier", "mountPath": tier, "readOnly": True},
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [
                {"name": "tier", "hostPath": {"path": tier, "type": "Directory"}},
                {"name": "tmp", "emptyDir": {}},
            ],
        },
    }


def test_the_gateway_image_serves_the_tier_from_a_read_only_container(
    tiered: Tiered, k8s_control_plane: ControlPlane, k8s_namespace: str, container_mode: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    assert Path(tiered.remote.removeprefix("file://")).is_dir()
    port = free_port_block(9)  # bootstrap, brokers at port + node id, metrics at port + 9
    plane.request("POST", f"/api/v1/namespaces/{ns}/pods", gateway_pod(tiered, port))

    def running() -> dict[str, Any] | None:
        pod: dict[str, Any] = plane.request("GET", f"/api/v1/namespaces/{ns}/pods/gateway")
        phase = pod.get("status", {}).get("phase")
        assert phase in (None, "Pending", "Running"), (pod.get("status"), _log(plane, ns))
        return pod if phase == "Running" else None

    pod = wait_until(running, DEADLINE)
    assert pod is not None, _log(plane, ns)
    (status,) = pod["status"]["containerStatuses"]
    assert status["containerID"].startswith(f"{container_mode}://"), status
    assert wait_port(port, DEADLINE), _log(plane, ns)
    got = read_all(f"127.0.0.1:{port}", tiered.topic)
    assert got == tiered.expected, (len(got), len(tiered.expected), _log(plane, ns)[-3000:])

    plane.request("DELETE", f"/api/v1/namespaces/{ns}/pods/gateway")
    gone = wait_until(lambda: _gone(plane, ns), DEADLINE)
    assert gone, "the gateway pod was not deleted"
    assert "tierkeeper gateway: bootstrap" in _log(plane, ns)


def _gone(plane: ControlPlane, ns: str) -> bool:
    names = [p["metadata"]["name"] for p in plane.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]]
    return "gateway" not in names


def _log(plane: ControlPlane, ns: str) -> str:
    try:
        return plane.kubelet.logs(ns, "gateway", "gateway")
    except HarnessError as exc:
        return str(exc)
