"""Replica fetchers through the operator, on the harness's real control plane with a real 5-broker Kafka
4.1 cluster (topology: fetchers.fetcher_topology, where Kafka's running count leaves threads idle).

The operator's rounds run as the chart's ClusterRole. Each TieredBroker gets a proposal in
``status.fetchers`` and stays Ready with ``FetcherChangePending=True`` (kstatus: Current). The annotation
``tierkeeper.io/fetchers`` drives it as Strimzi's KafkaRebalance: ``approve`` sets one step per round
(Reconciling while it applies), ``stop`` halts between steps and keeps the reached count, ``refresh``
plans again from there; the operator removes each annotation it acted on. The same commands come from
Git as ``spec.replicaFetchers.request`` ({id, command}), acted on once per id however often the
manifest is re-applied (``status.requests.fetchers``). A restarted operator
carries a change on from its status. Every broker's log then shows
the planned resizes and its fetcher threads carry the partitions the plan predicted. A new topic
produces a new proposal. Invalid fetcher specs are refused at admission (CEL).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from fetchers.fetcher_topology import (
    BOUNDS,
    BROKER_CONFIG,
    LATE_TOPIC,
    START_COUNT,
    TOPICS,
    create_topics,
    logged_resizes,
    wait_logs_match_model,
)
from test_k8s_operator_real import chart_rbac, kstatus

from harness.control_plane import ControlPlane
from harness.k8s import load_crds
from harness.kafka import KafkaCluster
from harness.kube_rest import ApiError
from storage_core.adapters.kafka_fetchers import FetcherAdmin
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.fetchers.planner import step_plan
from tierkeeper_operator.compose import build_reconciler
from tierkeeper_operator.kube import Kube

pytestmark = pytest.mark.kafka
DEADLINE = 240.0
API = "/apis/tierkeeper.io/v1alpha1"


def broker_resource(name: str, broker: int, fetchers: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "tierkeeper.io/v1alpha1",
        "kind": "TieredBroker",
        "metadata": {"name": name},
        "spec": {
            "clusterRef": {"name": "five"},
            "brokerId": broker,
            "logDir": {"claimName": f"data-{broker}", "path": "/var/lib/kafka/data"},
            "replicaFetchers": fetchers,
        },
    }


def test_operator_proposes_and_applies_fetcher_changes_by_annotation(
    k8s_control_plane: ControlPlane,
    k8s_namespace: str,
    kafka_cluster_factory: Callable[..., KafkaCluster],
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    plane.apply_crds(load_crds())
    brokers_path = f"{API}/namespaces/{ns}/tieredbrokers"

    # Admission: the CRD's CEL rules refuse contradictory fetcher specs with the model's message.
    for bad, message in (
        ({"mode": "fixed"}, "replicaFetchers.value is required when mode is fixed"),
        ({"mode": "fixed", "value": 4, "autoApprove": True}, "autoApprove applies to mode auto only"),
        ({"min": 9}, "replicaFetchers.min must not exceed replicaFetchers.max"),
    ):
        with pytest.raises(ApiError) as refused:
            plane.request("POST", brokers_path, broker_resource("bad", 1, bad))
        assert refused.value.code == 422 and message in str(refused.value), refused.value

    kafka = kafka_cluster_factory(5, BROKER_CONFIG)
    create_topics(kafka, TOPICS)
    wait_logs_match_model(kafka, dict.fromkeys(kafka.node_ids, START_COUNT), TOPICS)
    for b in kafka.node_ids:
        spec = {"mode": "auto", **BOUNDS, "replanIntervalSeconds": 10}
        plane.request("POST", brokers_path, broker_resource(f"broker-{b}", b, spec))
    cluster = KafkaClusterConfig.model_validate(
        {"name": "five", "bootstrapServers": kafka.bootstrap_servers, "remote": {"url": "file:///unused"}}
    )
    token = chart_rbac(plane, ns)
    reconciler = build_reconciler(Kube(plane.api_client(token=token), (ns,)), {"five": cluster})
    admin = FetcherAdmin(kafka.bootstrap_servers)

    def get(b: int) -> dict[str, Any]:
        obj: dict[str, Any] = plane.request("GET", f"{brokers_path}/broker-{b}")
        return obj

    def fetchers(b: int) -> dict[str, Any]:
        status: dict[str, Any] = get(b)["status"]["fetchers"]
        return status

    def conditions(b: int) -> dict[str, str]:
        return {c["type"]: c["status"] for c in get(b)["status"]["conditions"]}

    def annotate(b: int, command: str) -> None:
        plane.rest().call(
            "PATCH",
            f"{brokers_path}/broker-{b}",
            {"metadata": {"annotations": {"tierkeeper.io/fetchers": command}}},
            content_type="application/merge-patch+json",
        )

    def value(b: int) -> int:
        return admin.settings([b])[b].value

    reconciler.run_round()
    proposals = {b: fetchers(b) for b in kafka.node_ids}
    for b, proposal in proposals.items():
        assert proposal["phase"] == "ProposalReady" and proposal["before"]["idleThreads"] > 0, proposal
        assert conditions(b) == {"Ready": "True", "FetcherChangePending": "True"}
        assert kstatus(get(b)) == "Current"  # a change waiting for a person holds no GitOps tool
        assert value(b) == START_COUNT
    x = next(b for b, p in proposals.items() if len(p["steps"]) >= 2)
    steps = proposals[x]["steps"]

    def pending_seconds(b: int) -> float | None:
        return reconciler.metrics.registry.get_sample_value(
            "tierkeeper_fetcher_proposal_pending_seconds", {"cluster": "five", "broker": str(b)}
        )

    assert all(pending_seconds(b) is not None for b in kafka.node_ids)  # what the pending alert watches

    # approve -> the first step only, in effect before the round ends; Reconciling while it applies.
    annotate(x, "approve")
    reconciler.run_round()
    assert "tierkeeper.io/fetchers" not in (get(x)["metadata"].get("annotations") or {})
    assert fetchers(x)["phase"] == "Applying" and fetchers(x)["applied"] == steps[:1]
    assert conditions(x) == {"Ready": "True", "Reconciling": "True", "FetcherChangePending": "False"}
    assert value(x) == steps[0]

    # stop, from Git (spec.replicaFetchers.request, GitOps-safe) -> no further step, the broker keeps the
    # count it reached, round after round; the id is recorded as acted on.
    request = {"id": "stop-1", "command": "stop"}
    plane.rest().call(
        "PATCH",
        f"{brokers_path}/broker-{x}",
        {"spec": {"replicaFetchers": {"request": request}}},
        content_type="application/merge-patch+json",
    )
    reconciler.run_round()
    reconciler.run_round()
    assert fetchers(x)["phase"] == "Stopped" and value(x) == steps[0]
    assert get(x)["status"]["requests"] == {"fetchers": "stop-1"}
    waiting = next(b for b in kafka.node_ids if b != x)
    assert fetchers(waiting)["phase"] == "ProposalReady" and (pending_seconds(waiting) or 0.0) > 0.0
    assert pending_seconds(x) == 0.0  # stopped: nothing waits for approval
    assert conditions(x)["Ready"] == "True" and "Reconciling" not in conditions(x)

    # refresh (kubectl) -> a new proposal from where the broker is now. The stop still in the spec (Git
    # re-applies it) was acted on once and is not repeated: the proposal stays ready.
    annotate(x, "refresh")
    reconciler.run_round()
    reconciler.run_round()
    refreshed = fetchers(x)
    assert refreshed["phase"] == "ProposalReady" and refreshed["current"] == steps[0]
    assert refreshed["steps"] == list(step_plan(steps[0], refreshed["proposed"]))

    for b in kafka.node_ids:
        annotate(b, "approve")
    reconciler.run_round()
    # The operator restarts between steps: the change lives in status.fetchers, so a new one carries on.
    reconciler = build_reconciler(Kube(plane.api_client(token=token), (ns,)), {"five": cluster})
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        reconciler.run_round()
        if all(fetchers(b)["phase"] == "Balanced" for b in kafka.node_ids):
            break
    counts = {}
    for b in kafka.node_ids:
        done = fetchers(b)
        assert done["phase"] == "Balanced", done
        path = (
            [START_COUNT, *steps[:1], *refreshed["steps"]]
            if b == x
            else [START_COUNT, *proposals[b]["steps"]]
        )
        assert logged_resizes(kafka, b) == list(zip(path, path[1:], strict=False)), b
        assert value(b) == done["current"] == path[-1]
        assert conditions(b) == {"Ready": "True", "FetcherChangePending": "False"}
        counts[b] = path[-1]
    wait_logs_match_model(kafka, counts, TOPICS)
    imbalance = reconciler.metrics.registry.get_sample_value(
        "tierkeeper_fetcher_imbalance", {"cluster": "five", "broker": str(x)}
    )
    assert imbalance is not None and imbalance >= 1.0
    assert all(pending_seconds(b) == 0.0 for b in kafka.node_ids)  # nothing waits for approval any more
    reasons = {e["reason"] for e in plane.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]}
    assert {
        "FetcherProposal",
        "FetcherChangeStarted",
        "FetcherChangeStopped",
        "FetcherChangeApplied",
    } <= reasons

    # A new topic changes the assignment: a new proposal once the replan interval (10 s) has passed.
    before = {b: fetchers(b) for b in kafka.node_ids}
    name, parts, rf, start, shift = LATE_TOPIC
    create_topics(kafka, {name: (parts, rf, start, shift)})
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        reconciler.run_round()
        if all(fetchers(b)["plannedAt"] != before[b]["plannedAt"] for b in kafka.node_ids):
            break
        time.sleep(1)
    for b in kafka.node_ids:
        after = fetchers(b)
        assert after["plannedAt"] != before[b]["plannedAt"] and after["observed"] != before[b]["observed"]
        assert after["before"]["partitions"] > before[b]["before"]["partitions"], (before[b], after)
        assert after["phase"] in ("ProposalReady", "Balanced")
        assert conditions(b)["FetcherChangePending"] == (
            "True" if after["phase"] == "ProposalReady" else "False"
        )
