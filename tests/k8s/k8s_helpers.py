"""Small helpers for tests against the harness control plane: create objects, wait for conditions."""

from __future__ import annotations

import dataclasses
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from harness.control_plane import ControlPlane
from harness.k8s import load_crds, wait_until
from harness.kafka import KafkaCluster
from harness.kube_rest import ApiError
from harness.pod_images import default_images
from tierkeeper_operator.jobs import LABEL_KIND, job_state

# Generous: on a busy 2-core CI machine a pod's Python process may take many seconds to start.
DEADLINE = 120.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def create(plane: ControlPlane, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = plane.request("POST", path, body)
    return answer


def pod_manifest(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": containers, **spec},
    }


def service_account_with_role(
    plane: ControlPlane, namespace: str, account: str, role: str, rules: list[dict[str, Any]]
) -> None:
    """A ServiceAccount ``account`` bound to a new Role ``role`` granting ``rules`` in ``namespace``."""
    create(
        plane,
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
    )
    create(
        plane,
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": role},
            "rules": rules,
        },
    )
    create(
        plane,
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )


def restore_crds_and_drop(plane: ControlPlane, namespace: str) -> None:
    """The repository's CRDs again, and ``namespace`` deleted unless it is gone already."""
    # A test that installed or uninstalled the chart's CRDs must not leave them to the tests that follow.
    plane.apply_crds(load_crds())
    try:
        plane.request("DELETE", f"/api/v1/namespaces/{namespace}")
    except ApiError:
        pass


def get_pod(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        pod: dict[str, Any] = plane.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise
    return pod


def wait_for(probe: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    """``probe``'s first truthy value; fails the test with ``what`` when the deadline passes first."""
    value = wait_until(probe, timeout)
    assert value, f"timed out after {timeout}s waiting for {what}"
    return value


def finished_pod(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    """The pod once its phase is Succeeded or Failed."""

    def probe() -> dict[str, Any] | None:
        pod = get_pod(plane, namespace, name)
        return pod if pod and pod.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

    pod: dict[str, Any] = wait_for(probe, f"pod {namespace}/{name} to finish")
    return pod


def terminated(pod: dict[str, Any], container: str) -> dict[str, Any]:
    statuses = {s["name"]: s for s in pod["status"].get("containerStatuses", [])}
    state: dict[str, Any] = statuses[container]["state"]["terminated"]
    return state


def produce(kafka: KafkaCluster, topic: str, count: int) -> None:
    """``count`` records of 320 bytes, keyed by their index, with the cluster's client properties (SASL)."""
    client = {"bootstrap.servers": kafka.bootstrap_servers, **kafka.client_config}
    producer = Producer({**client, "batch.size": 16384, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=(f"{i:08d}" * 40).encode())
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


REPLAY = """
import pathlib, sys, time
result = pathlib.Path(sys.argv[1]) / sys.argv[2]
deadline = time.monotonic() + 600
while not result.exists():
    if time.monotonic() > deadline:
        sys.exit(f"no result of {sys.argv[2]} to replay")
    time.sleep(0.2)
pathlib.Path("/dev/termination-log").write_text(result.read_text())
"""
"""The replay image's program: it waits for the file ``results/<the Job's verb>`` (its first argument) and
leaves its text as the Job's result."""


def replay_image(plane: ControlPlane, results: Path) -> str:
    """An image for the operator's Jobs that does no work: each Job leaves the result a test wrote to
    ``results/<verb>`` (copy, cleanup, export) as its termination message, as soon as it exists."""
    tierkeeper = default_images()["tierkeeper"]
    plane.kubelet.images["tierkeeper-replay"] = dataclasses.replace(
        tierkeeper,
        entrypoint=(sys.executable, "-c", REPLAY, str(results)),
        needs=(*tierkeeper.needs, str(results)),
    )
    return "tierkeeper-replay"


def job_finished(plane: ControlPlane, ns: str, kind: str) -> None:
    """Wait until a Job of ``kind`` (its tierkeeper.io/kind label) in ``ns`` has succeeded."""

    def probe() -> bool:
        jobs = plane.request(
            "GET", f"/apis/batch/v1/namespaces/{ns}/jobs?labelSelector={LABEL_KIND}%3D{kind}"
        )
        return any(job_state(job) == "Succeeded" for job in jobs["items"])

    wait_for(probe, f"the {kind} Job to finish")
