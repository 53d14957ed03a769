"""Restricted Pod Security for every pod Tierkeeper runs: the operator's (the chart's Deployment) and each
kind of Job the operator creates pass `pod-security.kubernetes.io/enforce: restricted` on a labelled
namespace of the harness API server, which refuses a pod that breaks the profile (checked too, so a pass
means something). Pods are created with ``dryRun=All``: admission runs in full, nothing is stored."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from k8s_helpers import unique

from harness.control_plane import ControlPlane
from harness.kube_rest import ApiError
from harness.paths import REPO_ROOT
from harness.tools import run_tool
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.cluster_parts import GatewaySpec
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.reconcile.planner import CleanupAction, CopyAction, TopicPartitions
from tierkeeper_operator.gateway_objects import deployment
from tierkeeper_operator.job_kinds import cleanup_job, copy_job, delete_job
from tierkeeper_operator.jobs import Owner

CLUSTER = KafkaClusterConfig.model_validate(
    {
        "name": "c",
        "bootstrapServers": "k:9092",
        "remote": {"url": "s3://b/p", "storageOptionsSecretRef": {"name": "s3"}},
    }
)
BROKER = TieredBrokerSpec.model_validate(
    {
        "clusterRef": {"name": "c"},
        "brokerId": 2,
        "logDir": {"claimName": "data-2", "path": "/var/lib/kafka/data"},
    }
)
TOPIC = TieredTopicSpec.model_validate({"clusterRef": {"name": "c"}, "topic": "orders"})


def job_pods() -> dict[str, dict[str, Any]]:
    """The pod spec of each kind of Job the operator creates."""
    owner = Owner("TieredTopic", "orders", "kafka", "u")
    jobs = {
        "copy": copy_job(
            CopyAction("c", 2, "kafka/b", (TopicPartitions("kafka/orders", "orders", (0,)),)),
            CLUSTER,
            BROKER,
            Owner("TieredBroker", "b", "kafka", "u"),
            "node-a",
            "r",
        ),
        "cleanup": cleanup_job(CleanupAction("c", "kafka/orders", "orders", TOPIC), CLUSTER, owner, "r"),
        "delete": delete_job("orders", "id", "c", CLUSTER, owner, "r"),
    }
    return {kind: job["spec"]["template"]["spec"] for kind, job in jobs.items()}


def operator_pod() -> dict[str, Any]:
    out = run_tool("helm", ["template", "tk", str(REPO_ROOT / "charts" / "tierkeeper")]).stdout
    deployment = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")
    # A dry run creates no ServiceAccount; the namespace's default one stands in for the chart's.
    return {**deployment["spec"]["template"]["spec"], "serviceAccountName": "default"}


def gateway_pod() -> dict[str, Any]:
    """The pod template of a TieredCluster's gateway Deployment (with a TLS Secret and the Kafka client
    Secret mounted: every volume it can have)."""
    cluster = KafkaClusterConfig.model_validate(
        {**CLUSTER.model_dump(by_alias=True), "clientConfigSecretRef": {"name": "kafka-client"}}
    )
    gateway = GatewaySpec.model_validate({"enabled": True, "tlsSecretRef": {"name": "tls"}})
    made = deployment(cluster, gateway, "kafka", Owner("TieredCluster", "c", "kafka", "u"))
    spec: dict[str, Any] = made["spec"]["template"]["spec"]
    return spec


def all_pods() -> dict[str, dict[str, Any]]:
    return {
        "operator": operator_pod(),
        "gateway": gateway_pod(),
        **{f"{kind}-job": spec for kind, spec in job_pods().items()},
    }


@pytest.fixture(scope="module")
def restricted(k8s_control_plane: ControlPlane) -> Iterator[tuple[ControlPlane, str]]:
    ns = unique("restricted")
    k8s_control_plane.create_namespace(ns, labels={"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        yield k8s_control_plane, ns
    finally:
        k8s_control_plane.request("DELETE", f"/api/v1/namespaces/{ns}")


def create_pod(plane: ControlPlane, ns: str, name: str, spec: dict[str, Any]) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    plane.request("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All&fieldValidation=Strict", pod)


@pytest.mark.parametrize("name", sorted(all_pods()))
def test_pod_passes_restricted(restricted: tuple[ControlPlane, str], name: str) -> None:
    plane, ns = restricted
    create_pod(plane, ns, name, all_pods()[name])


def _root(spec: dict[str, Any]) -> None:
    spec["securityContext"].pop("runAsNonRoot")
    spec["securityContext"]["runAsUser"] = 0
    for container in spec["containers"]:
        container["securityContext"].pop("runAsNonRoot", None)


def _escalation(spec: dict[str, Any]) -> None:
    spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True


def _capability(spec: dict[str, Any]) -> None:
    spec["containers"][0]["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"], "drop": ["ALL"]}


def _seccomp(spec: dict[str, Any]) -> None:
    spec["securityContext"]["seccompProfile"] = {"type": "Unconfined"}


def _host_path(spec: dict[str, Any]) -> None:
    spec["volumes"].append({"name": "host", "hostPath": {"path": "/var/lib/kafka"}})


VIOLATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "runs-as-root": _root,
    "privilege-escalation": _escalation,
    "added-capability": _capability,
    "unconfined-seccomp": _seccomp,
    "host-path": _host_path,
}


@pytest.mark.parametrize("violation", sorted(VIOLATIONS))
@pytest.mark.parametrize("name", ["operator", "copy-job"])
def test_a_violating_pod_is_refused(restricted: tuple[ControlPlane, str], name: str, violation: str) -> None:
    plane, ns = restricted
    spec = copy.deepcopy(all_pods()[name])
    VIOLATIONS[violation](spec)
    with pytest.raises(ApiError) as refused:
        create_pod(plane, ns, f"{name}-{violation}", spec)
    assert refused.value.code == 403, refused.value
    assert 'violates PodSecurity "restricted:latest"' in refused.value.message, refused.value
