"""The operator writes kstatus conditions (Ready always; Reconciling / Stalled only while true) on the real
API server: TieredTopics through its reconcile rounds, TieredBrokers through its kopf handler (run by kopf's
KopfRunner). Whatever the CRD schema and its CEL rules can say is refused by the API server at admission, so
the operator never sees it; what only the operator knows (the cluster a clusterRef names) it reports as
Stalled."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from k8s_helpers import unique

from harness.control_plane import ControlPlane
from harness.k8s import running_operator, tiered_broker, wait_until
from harness.kafka import KafkaCluster
from harness.kafka_dist import HarnessError
from harness.kubeconfig import write_kubeconfig
from harness.paths import REPO_ROOT
from harness.ports import free_ports
from storage_core.api.cluster import KafkaClusterConfig
from tierkeeper_operator import GROUP, VERSION
from tierkeeper_operator.compose import build_reconciler
from tierkeeper_operator.kube import Kube
from tierkeeper_operator.loop import Reconciler

DEADLINE = 120.0
CLUSTERS = {
    "my-cluster": KafkaClusterConfig.model_validate(
        yaml.safe_load((REPO_ROOT / "examples" / "cluster.yaml").read_text())
    )
}


def example(kind_file: str, name: str, namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / kind_file).read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    return doc


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


def status_when(
    api: Any, namespace: str, plural: str, name: str, wanted: str, generation: int, timeout: float = 60
) -> dict[str, Any]:
    """The object's status once its health (see :func:`health`) is ``wanted`` for ``generation``;
    whatever it has on timeout."""

    return _wait_for_health(api, namespace, plural, name, wanted, generation, timeout)


def _wait_for_health(
    api: Any,
    namespace: str,
    plural: str,
    name: str,
    wanted: str,
    generation: int,
    timeout: float,
    before_each: Callable[[], object] = lambda: None,
) -> dict[str, Any]:
    """The object's status once its health is ``wanted`` for ``generation`` (``before_each`` runs before
    every look); whatever it has on timeout."""

    def probe() -> dict[str, Any] | None:
        before_each()
        obj = api.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        status: dict[str, Any] = obj.get("status") or {}
        done = health(status) == wanted and status.get("observedGeneration") == generation
        return status if done else None

    found = wait_until(probe, timeout)
    if found:
        return dict(found)
    obj = api.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
    return dict(obj.get("status") or {})


def warning_events(kube_client: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    raw = kubernetes.client.CoreV1Api(kube_client).list_namespaced_event(namespace, _preload_content=False)
    return [
        event
        for event in json.loads(raw.data)["items"]
        if event["type"] == "Warning" and event["involvedObject"]["name"] == name
    ]


def local_setup(plane: ControlPlane, ns: str, kafka: KafkaCluster) -> tuple[Reconciler, str]:
    """A cluster configuration ``local`` for the harness broker, a usable TieredBroker for it, an empty
    Kafka topic, and the operator's rounds for ``ns``; returns the rounds and the topic's name."""
    cluster = KafkaClusterConfig.model_validate(
        {
            "name": "local",
            "bootstrapServers": kafka.bootstrap_servers,
            "remote": {"url": "memory://unused"},
            "jobs": {"image": "tierkeeper"},
        }
    )
    topic = unique("admission")
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "-1"})])[topic].result(60)
    kafka.wait_topic(topic, 1)
    (broker_id,) = kafka.node_ids
    broker = tiered_broker(broker_id, plane.kubelet.node_names[0])
    plane.request("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/tieredbrokers", broker)
    return build_reconciler(Kube(plane.api_client(), (ns,)), {"local": cluster}), topic


def status_after_rounds(
    rounds: Reconciler, api: Any, namespace: str, name: str, wanted: str, generation: int
) -> dict[str, Any]:
    """The TieredTopic's status once a round left its health ``wanted`` for ``generation``; whatever it
    has after DEADLINE."""
    return _wait_for_health(
        api, namespace, "tieredtopics", name, wanted, generation, DEADLINE, before_each=rounds.run_round
    )


def test_admission_refuses_what_the_schema_says_and_the_rounds_report_the_rest(
    k8s_crds: ControlPlane, kube_client: Any, k8s_namespace: str, kafka_broker: KafkaCluster
) -> None:
    ns = k8s_namespace
    api = kubernetes.client.CustomObjectsApi(kube_client)
    rounds, topic = local_setup(k8s_crds, ns, kafka_broker)
    good = example("tieredtopic.yaml", "good", ns)
    good["spec"].update(clusterRef={"name": "local"}, topic=topic)
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", good)
    # The schema (types, bounds) and the CEL rules generated from storage_core/api/rules.py are the API
    # server's to enforce.
    negative = example("tieredtopic.yaml", "negative-interval", ns)
    negative["spec"]["copy"]["intervalSeconds"] = -5
    wrong_type = example("tieredtopic.yaml", "wrong-type", ns)
    wrong_type["spec"]["localRetentionMs"] = "six hours"
    both = example("tieredtopic.yaml", "interval-and-schedule", ns)
    both["spec"]["copy"]["schedule"] = "*/5 * * * *"
    for refused, words in (
        (negative, "spec.copy.intervalSeconds"),
        (wrong_type, "spec.localRetentionMs"),
        (both, "copy.schedule and copy.intervalSeconds are mutually exclusive"),
    ):
        with pytest.raises(kubernetes.client.ApiException) as rejection:
            api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", refused)
        assert rejection.value.status == 422 and words in rejection.value.body, rejection.value.body
    # What only the operator knows: which clusters its configuration defines.
    elsewhere = example("tieredtopic.yaml", "elsewhere", ns)
    elsewhere["spec"]["clusterRef"]["name"] = "no-such-cluster"
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", elsewhere)

    checked = status_after_rounds(rounds, api, ns, "good", "Ready=True", 1)
    bad = status_after_rounds(rounds, api, ns, "elsewhere", "Stalled", 1)
    events = wait_until(lambda: warning_events(kube_client, ns, "elsewhere"), 30)

    # A valid, empty topic is checked and has nothing to copy: Ready at once, never Stalled.
    assert health(checked) == "Ready=True", checked
    assert condition(checked, "Ready")["reason"] == "Empty"  # type: ignore[index]
    assert condition(checked, "Stalled") is None and condition(checked, "Reconciling") is None

    assert health(bad) == "Stalled", bad
    assert condition(bad, "Stalled")["reason"] == "ClusterNotFound"  # type: ignore[index]
    assert condition(bad, "Ready")["status"] == "False"  # type: ignore[index]
    assert condition(bad, "Reconciling") is None
    assert "'no-such-cluster'" in bad["message"]

    assert events
    assert events[0]["reason"] == "ClusterNotFound"


def test_fixing_a_stalled_topic_clears_stalled(
    k8s_crds: ControlPlane, kube_client: Any, k8s_namespace: str, kafka_broker: KafkaCluster
) -> None:
    ns = k8s_namespace
    api = kubernetes.client.CustomObjectsApi(kube_client)
    rounds, topic = local_setup(k8s_crds, ns, kafka_broker)
    broken = example("tieredtopic.yaml", "fix-me", ns)
    broken["spec"].update(clusterRef={"name": "not-yet"}, topic=topic)
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", broken)

    before = status_after_rounds(rounds, api, ns, "fix-me", "Stalled", 1)
    api.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "tieredtopics", "fix-me", {"spec": {"clusterRef": {"name": "local"}}}
    )
    after = status_after_rounds(rounds, api, ns, "fix-me", "Ready=True", 2)

    assert health(before) == "Stalled", before
    assert "'not-yet'" in before["message"]
    assert health(after) == "Ready=True", after
    assert condition(after, "Stalled") is None  # gone once it is no longer true (kstatus)
    assert condition(after, "Ready")["observedGeneration"] == 2  # type: ignore[index]


def test_tieredbroker_rules_at_admission_and_status(
    k8s_crds: ControlPlane, kube_client: Any, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    api = kubernetes.client.CustomObjectsApi(kube_client)
    fixed_without_value = example("tieredbroker.yaml", "broker-1", ns)
    fixed_without_value["spec"]["replicaFetchers"] = {"mode": "fixed"}
    with pytest.raises(kubernetes.client.ApiException) as rejection:
        api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredbrokers", fixed_without_value)
    assert rejection.value.status == 422
    assert "replicaFetchers.value is required when mode is fixed" in rejection.value.body

    with running_operator(k8s_crds, clusters=CLUSTERS) as runner:
        api.create_namespaced_custom_object(
            GROUP, VERSION, ns, "tieredbrokers", example("tieredbroker.yaml", "broker-0", ns)
        )
        good = status_when(api, ns, "tieredbrokers", "broker-0", "Ready=True", 1)

    assert health(good) == "Ready=True", runner.output


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


def test_rounds_list_in_pages_without_managed_fields(
    k8s_crds: ControlPlane, kube_client: Any, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    api = kubernetes.client.CustomObjectsApi(kube_client)
    names = [f"paged-{i}" for i in range(5)]
    for name in names:
        api.create_namespaced_custom_object(
            GROUP, VERSION, ns, "tieredtopics", example("tieredtopic.yaml", name, ns)
        )
    raw = api.list_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics")["items"]
    assert all(o["metadata"].get("managedFields") for o in raw)  # what the server sends, and slim drops
    listed = Kube(k8s_crds.api_client(), (ns,)).list_resources("tieredtopics", page_size=2)
    assert sorted(o["metadata"]["name"] for o in listed) == names  # three pages, each object once
    assert not any("managedFields" in o["metadata"] for o in listed)
    assert all(o["metadata"]["resourceVersion"] and o["spec"]["topic"] == "orders" for o in listed)
