"""The operator, run by kopf's KopfRunner against the real API server, validates specs and writes status."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from harness.control_plane import ControlPlane
from harness.k8s import running_operator, wait_until
from harness.kafka_dist import HarnessError
from harness.kubeconfig import write_kubeconfig
from harness.paths import REPO_ROOT
from harness.ports import free_ports
from tierkeeper_operator import GROUP, VERSION


def example(kind_file: str, name: str, namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / kind_file).read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    return doc


def status_when(
    api: Any, namespace: str, plural: str, name: str, phase: str, generation: int, timeout: float = 60
) -> dict[str, Any]:
    """The object's status once it reports ``phase`` for ``generation``; whatever it has on timeout."""

    def probe() -> dict[str, Any] | None:
        obj = api.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        status: dict[str, Any] = obj.get("status") or {}
        done = status.get("phase") == phase and status.get("observedGeneration") == generation
        return status if done else None

    found = wait_until(probe, timeout)
    if found:
        return dict(found)
    last: dict[str, Any] = (
        api.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name).get("status") or {}
    )
    return last


def warning_events(kube_client: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    raw = kubernetes.client.CoreV1Api(kube_client).list_namespaced_event(namespace, _preload_content=False)
    return [
        event
        for event in json.loads(raw.data)["items"]
        if event["type"] == "Warning" and event["involvedObject"]["name"] == name
    ]


def test_valid_and_malformed_topics(k8s_crds: ControlPlane, kube_client: Any, k8s_namespace: str) -> None:
    ns = k8s_namespace
    api = kubernetes.client.CustomObjectsApi(kube_client)
    # Created before the operator starts: handled on resume. Created while it runs: handled on create.
    api.create_namespaced_custom_object(
        GROUP, VERSION, ns, "tieredtopics", example("tieredtopic.yaml", "good", ns)
    )
    # What the CRD schema can say is refused by the API server itself; the operator never sees it.
    negative = example("tieredtopic.yaml", "negative-interval", ns)
    negative["spec"]["copy"]["intervalSeconds"] = -5
    wrong_type = example("tieredtopic.yaml", "wrong-type", ns)
    wrong_type["spec"]["localRetentionMs"] = "six hours"
    for refused, field in ((negative, "spec.copy.intervalSeconds"), (wrong_type, "spec.localRetentionMs")):
        with pytest.raises(kubernetes.client.ApiException) as rejection:
            api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", refused)
        assert rejection.value.status == 422 and field in rejection.value.body
    # What it cannot say (a rule across fields) is the operator's to report.
    both = example("tieredtopic.yaml", "interval-and-schedule", ns)
    both["spec"]["copy"]["schedule"] = "*/5 * * * *"

    with running_operator(k8s_crds) as runner:
        api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", both)
        good = status_when(api, ns, "tieredtopics", "good", "Accepted", 1)
        bad = status_when(api, ns, "tieredtopics", "interval-and-schedule", "Invalid", 1)
        events = wait_until(lambda: warning_events(kube_client, ns, "interval-and-schedule"), 30)

    assert runner.exception is None, runner.output
    assert good.get("phase") == "Accepted", runner.output
    assert good["conditions"][0]["status"] == "True"

    assert bad.get("phase") == "Invalid", runner.output
    assert bad["message"].startswith("spec.copy:"), bad["message"]
    assert "mutually exclusive" in bad["message"]
    assert bad["conditions"][0]["reason"] == "InvalidSpec"

    assert events, runner.output
    assert events[0]["reason"] == "InvalidSpec"
    assert events[0]["message"] == bad["message"]


def test_fixing_an_invalid_spec_is_accepted(
    k8s_crds: ControlPlane, kube_client: Any, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    api = kubernetes.client.CustomObjectsApi(kube_client)
    broken = example("tieredtopic.yaml", "fix-me", ns)
    broken["spec"]["localRetentionMs"] = broken["spec"]["remoteRetentionMs"] + 1
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", broken)

    with running_operator(k8s_crds) as runner:
        before = status_when(api, ns, "tieredtopics", "fix-me", "Invalid", 1)
        api.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "tieredtopics", "fix-me", {"spec": {"localRetentionMs": 3600000}}
        )
        after = status_when(api, ns, "tieredtopics", "fix-me", "Accepted", 2)

    assert before.get("phase") == "Invalid", runner.output
    assert "must not exceed remote retention" in before["message"]
    assert after.get("phase") == "Accepted", runner.output
    assert after["conditions"][0]["observedGeneration"] == 2


def test_tieredbroker_is_validated(k8s_crds: ControlPlane, kube_client: Any, k8s_namespace: str) -> None:
    ns = k8s_namespace
    api = kubernetes.client.CustomObjectsApi(kube_client)
    fixed_without_value = example("tieredbroker.yaml", "broker-1", ns)
    fixed_without_value["spec"]["replicaFetchers"] = {"mode": "fixed"}

    with running_operator(k8s_crds) as runner:
        api.create_namespaced_custom_object(
            GROUP, VERSION, ns, "tieredbrokers", example("tieredbroker.yaml", "broker-0", ns)
        )
        api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredbrokers", fixed_without_value)
        good = status_when(api, ns, "tieredbrokers", "broker-0", "Accepted", 1)
        bad = status_when(api, ns, "tieredbrokers", "broker-1", "Invalid", 1)

    assert good.get("phase") == "Accepted", runner.output
    assert bad.get("phase") == "Invalid", runner.output
    assert "replicaFetchers.value is required when mode is fixed" in bad["message"]


@dataclass
class UnreachableApi:
    """A kubeconfig that points at a closed loopback port."""

    kubeconfig: Path

    def watched(self) -> set[str]:
        return set()


def test_operator_without_an_api_fails_loudly(k8s_control_plane: ControlPlane, tmp_path: Path) -> None:
    (closed_port,) = free_ports(1)
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig",
        server=f"https://127.0.0.1:{closed_port}",
        ca_cert=k8s_control_plane.ca_cert,
        token="unused",
    )
    with pytest.raises(HarnessError, match="did not start watching") as failure:
        with running_operator(UnreachableApi(kubeconfig), start_timeout=3):
            pass
    assert "its log:" in str(failure.value)
