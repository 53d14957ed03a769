"""The operator, run by kopf's KopfRunner against the emulated API, validates specs and writes kstatus
conditions (Ready always; Reconciling / Stalled only while true)."""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest
import yaml

from harness.k8s import KubeApiServer, running_operator, wait_until
from harness.kafka_dist import HarnessError
from harness.paths import REPO_ROOT
from storage_core.api.cluster import KafkaClusterConfig
from tierkeeper_operator import GROUP, VERSION

NAMESPACE = "default"
CLUSTERS = {
    "my-cluster": KafkaClusterConfig.model_validate(
        yaml.safe_load((REPO_ROOT / "examples" / "cluster.yaml").read_text())
    )
}


def condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)


def health(status: dict[str, Any]) -> str:
    """``Stalled`` or ``Reconciling`` when that condition is True, else the Ready condition's status."""
    for kind in ("Stalled", "Reconciling"):
        found = condition(status, kind)
        if found and found["status"] == "True":
            return kind
    ready = condition(status, "Ready")
    return f"Ready={ready['status']}" if ready else "none"


def example(kind_file: str, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / kind_file).read_text())
    doc["metadata"] = {"name": name, "namespace": NAMESPACE}
    return doc


def status_when(
    api: Any, plural: str, name: str, wanted: str, generation: int, timeout: float = 30
) -> dict[str, Any]:
    """The object's status once its health (see :func:`health`) is ``wanted`` for ``generation``;
    whatever it has on timeout."""

    def probe() -> dict[str, Any] | None:
        obj = api.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, name)
        status: dict[str, Any] = obj.get("status") or {}
        done = health(status) == wanted and status.get("observedGeneration") == generation
        return status if done else None

    found = wait_until(probe, timeout)
    if found:
        return dict(found)
    last: dict[str, Any] = (
        api.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, name).get("status") or {}
    )
    return last


def warning_events(kube_client: Any, name: str) -> list[dict[str, Any]]:
    raw = kubernetes.client.CoreV1Api(kube_client).list_namespaced_event(NAMESPACE, _preload_content=False)
    return [
        event
        for event in json.loads(raw.data)["items"]
        if event["type"] == "Warning" and event["involvedObject"]["name"] == name
    ]


def test_valid_and_malformed_topics(kube_api: KubeApiServer, kube_client: Any) -> None:
    api = kubernetes.client.CustomObjectsApi(kube_client)
    # Created before the operator starts: handled on resume. Created while it runs: handled on create.
    api.create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "tieredtopics", example("tieredtopic.yaml", "good")
    )
    negative = example("tieredtopic.yaml", "negative-interval")
    negative["spec"]["copy"]["intervalSeconds"] = -5
    wrong_type = example("tieredtopic.yaml", "wrong-type")
    wrong_type["spec"]["localRetentionMs"] = "six hours"

    with running_operator(kube_api, clusters=CLUSTERS) as runner:
        api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "tieredtopics", negative)
        api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "tieredtopics", wrong_type)
        good = status_when(api, "tieredtopics", "good", "Reconciling", 1)
        bad_interval = status_when(api, "tieredtopics", "negative-interval", "Stalled", 1)
        bad_type = status_when(api, "tieredtopics", "wrong-type", "Stalled", 1)
        events = wait_until(lambda: warning_events(kube_client, "negative-interval"), 10)

    assert runner.exception is None, runner.output
    # A valid topic waits for its first copy round: Reconciling, Ready False, never Stalled.
    assert health(good) == "Reconciling", runner.output
    assert condition(good, "Ready")["status"] == "False"  # type: ignore[index]
    assert condition(good, "Stalled") is None

    assert health(bad_interval) == "Stalled", runner.output
    assert bad_interval["message"].startswith("spec.copy.intervalSeconds:"), bad_interval["message"]
    assert "-5" in bad_interval["message"]
    assert condition(bad_interval, "Stalled")["reason"] == "InvalidSpec"  # type: ignore[index]
    assert condition(bad_interval, "Ready")["status"] == "False"  # type: ignore[index]
    assert condition(bad_interval, "Reconciling") is None

    assert health(bad_type) == "Stalled", runner.output
    assert bad_type["message"].startswith("spec.localRetentionMs:"), bad_type["message"]
    assert "'six hours'" in bad_type["message"]

    assert events, runner.output
    assert events[0]["reason"] == "InvalidSpec"
    assert events[0]["message"] == bad_interval["message"]


def test_fixing_an_invalid_spec_is_accepted(kube_api: KubeApiServer, kube_client: Any) -> None:
    api = kubernetes.client.CustomObjectsApi(kube_client)
    broken = example("tieredtopic.yaml", "fix-me")
    broken["spec"]["localRetentionMs"] = broken["spec"]["remoteRetentionMs"] + 1
    api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "tieredtopics", broken)

    with running_operator(kube_api, clusters=CLUSTERS) as runner:
        before = status_when(api, "tieredtopics", "fix-me", "Stalled", 1)
        api.patch_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "tieredtopics", "fix-me", {"spec": {"localRetentionMs": 3600000}}
        )
        after = status_when(api, "tieredtopics", "fix-me", "Reconciling", 2)

    assert health(before) == "Stalled", runner.output
    assert "localRetentionMs must not exceed remoteRetentionMs" in before["message"]
    assert health(after) == "Reconciling", runner.output
    assert condition(after, "Stalled") is None  # gone once it is no longer true (kstatus)
    assert condition(after, "Ready")["observedGeneration"] == 2  # type: ignore[index]


def test_tieredbroker_is_validated(kube_api: KubeApiServer, kube_client: Any) -> None:
    api = kubernetes.client.CustomObjectsApi(kube_client)
    fixed_without_value = example("tieredbroker.yaml", "broker-1")
    fixed_without_value["spec"]["replicaFetchers"] = {"mode": "fixed"}

    with running_operator(kube_api, clusters=CLUSTERS) as runner:
        api.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "tieredbrokers", example("tieredbroker.yaml", "broker-0")
        )
        api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "tieredbrokers", fixed_without_value)
        good = status_when(api, "tieredbrokers", "broker-0", "Ready=True", 1)
        bad = status_when(api, "tieredbrokers", "broker-1", "Stalled", 1)

    assert health(good) == "Ready=True", runner.output
    assert health(bad) == "Stalled", runner.output
    assert "replicaFetchers.value is required when mode is fixed" in bad["message"]


def test_operator_without_an_api_fails_loudly(kube_api: KubeApiServer) -> None:
    kube_api.stop()  # the kubeconfig now points at a closed port
    with pytest.raises(HarnessError, match="did not start watching") as failure:
        with running_operator(kube_api, start_timeout=3):
            pass
    assert "its log:" in str(failure.value)


def test_unknown_cluster_is_stalled(kube_api: KubeApiServer, kube_client: Any) -> None:
    api = kubernetes.client.CustomObjectsApi(kube_client)
    elsewhere = example("tieredtopic.yaml", "elsewhere")
    elsewhere["spec"]["clusterRef"]["name"] = "no-such-cluster"
    with running_operator(kube_api, clusters=CLUSTERS) as runner:
        api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "tieredtopics", elsewhere)
        status = status_when(api, "tieredtopics", "elsewhere", "Stalled", 1)
    assert health(status) == "Stalled", runner.output
    assert condition(status, "Stalled")["reason"] == "ClusterNotFound"  # type: ignore[index]
    assert "'no-such-cluster'" in status["message"]
