"""The operator on the harness's real control plane (kube-apiserver, controller-manager, process kubelet),
with a real 3-broker Kafka and moto S3: TieredTopic -> copy Jobs (one per broker, the broker's log-dir
claim mounted read-only) and a cleanup Job, run by the kubelet as real ``tierkeeper`` commands; results
come back from the termination messages; segments land in S3, Kafka's log start moves only behind the
tier, the status reaches Ready with the remote summary, and kstatus reads Current. The cluster is a
TieredCluster created after the operator's first round (taking effect without a restart; it sums the
topic's tiered bytes). The operator's rounds run as the chart's ClusterRole through a ServiceAccount
token, and it restarts while its first Jobs run.
Finally deletionPolicy Delete: deleting the TieredTopic removes its remote tier before the object goes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import s3fs
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from k8s_helpers import produce

from harness.control_plane import ControlPlane
from harness.k8s import load_crds
from harness.kafka import KafkaCluster
from harness.kafka_dist import HarnessError
from harness.moto_s3 import MotoServer
from harness.paths import REPO_ROOT
from harness.tools import run_tool
from storage_core.adapters.kafka_admin import KafkaAdmin
from tierkeeper_operator.compose import build_reconciler
from tierkeeper_operator.jobs import ANNOTATION_RECORDED, LABEL_KIND
from tierkeeper_operator.kube import Kube

DEADLINE = 240.0  # pods start Python processes on a busy 2-core machine


def kstatus(obj: dict[str, Any]) -> str:
    """kstatus's generic rules (sigs.k8s.io/cli-utils pkg/kstatus/status/generic.go)."""
    status = obj.get("status") or {}
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return "InProgress"
    for condition in status.get("conditions", []):
        if condition["type"] == "Reconciling" and condition["status"] == "True":
            return "InProgress"
        if condition["type"] == "Stalled" and condition["status"] == "True":
            return "Failed"
    return "Current"


def chart_rbac(plane: ControlPlane, namespace: str) -> str:
    """The chart's ClusterRole bound to a ServiceAccount of ``namespace``; returns its token."""
    rendered = run_tool(
        "helm", ["template", "tk", str(REPO_ROOT / "charts" / "tierkeeper"), "--namespace", namespace]
    ).stdout
    role = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ClusterRole")
    role["metadata"] = {"name": f"tierkeeper-{namespace}"}
    plane.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    plane.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "operator"}}
    )
    binding = {
        "metadata": {"name": f"tierkeeper-{namespace}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}],
    }
    plane.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    return plane.token_for(namespace, "operator")


def tier_storage(
    plane: ControlPlane,
    namespace: str,
    kafka: KafkaCluster,
    moto_server: MotoServer,
    job_env: dict[str, str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """What the operator's Jobs need in ``namespace``: a bucket on moto, the brokers' log dirs as claims,
    and the ``s3`` Secret the Jobs take their environment from (the AWS keys, plus ``job_env``). Returns
    the bucket and moto's storage options."""
    bucket = f"tk-{namespace}"
    options = moto_server.storage_options()
    s3fs.S3FileSystem(**options).mkdir(bucket)
    log_dir_claims(plane, namespace, kafka)
    secret = {
        "AWS_ACCESS_KEY_ID": options["key"],
        "AWS_SECRET_ACCESS_KEY": options["secret"],
        **(job_env or {}),
    }
    plane.request(
        "POST", f"/api/v1/namespaces/{namespace}/secrets", {"metadata": {"name": "s3"}, "stringData": secret}
    )
    return bucket, options


def orders_topic(kafka: KafkaCluster, partitions: int, replicas: int, records: int) -> None:
    """Topic ``orders`` kept forever in 64 KiB segments, with ``records`` records produced to it."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    config = {"internal.segment.bytes": str(64 * 1024), "retention.ms": "-1"}
    admin.create_topics([NewTopic("orders", partitions, replicas, config=config)])["orders"].result(60)
    kafka.wait_topic("orders", partitions)
    produce(kafka, "orders", records)


def moto_remote(bucket: str, options: dict[str, Any]) -> dict[str, Any]:
    """A TieredCluster's ``remote`` in ``bucket`` on moto, with the ``s3`` Secret of tier_storage."""
    return {
        "url": f"s3://{bucket}/tier",
        "storageOptions": {k: options[k] for k in ("client_kwargs", "config_kwargs")},
        "storageOptionsSecretRef": {"name": "s3"},
    }


def tiered_broker_spec(cluster: str, broker: int, node: str) -> dict[str, Any]:
    """A TieredBroker spec whose log dir is the claim log_dir_claims made for ``broker``, on ``node``."""
    return {
        "clusterRef": {"name": cluster},
        "brokerId": broker,
        "logDir": {
            "claimName": f"data-{broker}",
            "mountPath": "/var/lib/kafka/data",
            "path": "/var/lib/kafka/data",
        },
        "placement": {"nodeName": node},
    }


def log_dir_claims(plane: ControlPlane, namespace: str, kafka: KafkaCluster) -> None:
    for node in kafka.node_ids:
        pv = f"{namespace}-data-{node}"
        plane.request(
            "POST",
            "/api/v1/persistentvolumes",
            {
                "metadata": {"name": pv},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "manual",
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": str(kafka.log_dir(node))},
                    "claimRef": {"namespace": namespace, "name": f"data-{node}"},
                },
            },
        )
        plane.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
            {
                "metadata": {"name": f"data-{node}"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "manual",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )


def resource(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "tierkeeper.io/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def test_operator_tiers_a_topic_with_jobs_on_a_real_control_plane(
    k8s_control_plane: ControlPlane,
    k8s_namespace: str,
    kafka_cluster_factory: Callable[..., KafkaCluster],
    moto_server: MotoServer,
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    plane.apply_crds(load_crds())
    kafka = kafka_cluster_factory(3)
    orders_topic(kafka, 3, 3, 3000)
    bucket, options = tier_storage(plane, ns, kafka, moto_server)
    # The cluster is a TieredCluster created after the operator's first round (below): it takes effect
    # without a restart, and a bucket-check Job runs with the copy Jobs' storage Secret.
    cluster_spec = {
        "bootstrapServers": kafka.bootstrap_servers,
        "remote": moto_remote(bucket, options),
        "jobs": {"image": "tierkeeper", "ttlSecondsAfterFinished": 600, "backoffLimit": 0},
    }
    node = plane.kubelet.node_names[0]
    for broker in kafka.node_ids:
        spec = tiered_broker_spec("local", broker, node)
        plane.request(
            "POST",
            f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredbrokers",
            resource("TieredBroker", f"broker-{broker}", spec),
        )
    topic_spec = {
        "clusterRef": {"name": "local"},
        "topic": "orders",
        "localRetentionMs": -1,
        "localRetentionBytes": 128 * 1024,
    }
    plane.request(
        "POST",
        f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredtopics",
        resource("TieredTopic", "orders", topic_spec),
    )

    token = chart_rbac(plane, ns)
    reconciler = build_reconciler(Kube(plane.api_client(token=token), (ns,)), {})
    reconciler.run_round()
    waiting = plane.request("GET", f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredtopics/orders")
    assert waiting["status"]["conditions"][0]["reason"] == "ClusterNotFound"
    plane.request(
        "POST",
        f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredclusters",
        resource("TieredCluster", "local", cluster_spec),
    )
    deadline = time.monotonic() + DEADLINE
    created: list[str] = []
    obj: dict[str, Any] = {}
    restarted = False
    while time.monotonic() < deadline:
        result = reconciler.run_round()
        created += result.created
        if created and not restarted:
            # The operator restarts while its first Jobs run: a new one keeps no memory but what the API
            # server holds, so it must neither start a second copy per broker nor lose a result.
            reconciler = build_reconciler(Kube(plane.api_client(token=token), (ns,)), {})
            restarted = True
        obj = plane.request("GET", f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredtopics/orders")
        status = obj.get("status") or {}
        if status.get("lastCopy") and status.get("lastCleanup") and kstatus(obj) == "Current":
            # lastCopy comes from the first copy Job recorded; the other brokers' may still run.
            listed = plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
            if all(j["metadata"].get("annotations", {}).get(ANNOTATION_RECORDED) == "true" for j in listed):
                break
        time.sleep(1)
    status = obj.get("status") or {}
    jobs = plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    logs = {}
    for pod in plane.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
        name = pod["metadata"]["name"]
        try:
            logs[name] = plane.kubelet.logs(ns, name, "tierkeeper")[-2000:]
        except HarnessError as exc:
            logs[name] = f"{exc}; status {pod.get('status')}"
    assert status.get("lastCopy", {}).get("result") == "Succeeded", (status, logs)
    assert status.get("lastCleanup", {}).get("result") == "Succeeded", (status, logs)
    assert kstatus(obj) == "Current", status
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Ready": "True"}

    kinds = sorted(j["metadata"]["labels"][LABEL_KIND] for j in jobs)
    # One copy per broker, no duplicates; the TieredCluster's bucket check.
    assert kinds == ["bucket-check", "cleanup", "copy", "copy", "copy"], kinds
    assert sorted(created) == sorted(j["metadata"]["name"] for j in jobs)
    assert all(j["metadata"]["annotations"].get(ANNOTATION_RECORDED) == "true" for j in jobs)
    copy_pod = plane.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={LABEL_KIND}%3Dcopy")[
        "items"
    ][0]
    assert copy_pod["spec"]["volumes"][1]["persistentVolumeClaim"]["readOnly"] is True
    assert copy_pod["spec"]["nodeName"] == node

    fs = s3fs.S3FileSystem(**options)
    assert fs.find(f"{bucket}/tier"), "nothing in S3"
    assert status["remote"]["segments"] > 3
    starts = KafkaAdmin(kafka.bootstrap_servers).log_start_offsets([("orders", p) for p in range(3)])
    for part in status["remote"]["partitions"]:
        assert 0 < starts[("orders", part["partition"])] <= part["endOffset"] + 1, (starts, part)

    tiered_cluster = plane.request(
        "GET", f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredclusters/local"
    )
    assert kstatus(tiered_cluster) == "Current", tiered_cluster["status"]
    assert tiered_cluster["status"]["tieredTopics"] == 1 and tiered_cluster["status"]["tieredBrokers"] == 3
    assert tiered_cluster["status"]["tieredBytes"] == status["remote"]["bytes"]
    events = plane.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    reasons = {e["reason"] for e in events}
    assert {"CopyStarted", "CopySucceeded", "CleanupStarted", "CleanupSucceeded"} <= reasons, reasons

    # A round after everything finished creates nothing new before the intervals pass and keeps the status.
    again = reconciler.run_round()
    assert again.created == [] and again.recorded == []
    after = plane.request("GET", f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredtopics/orders")
    assert after["status"]["conditions"] == obj["status"]["conditions"]
    assert json.loads(json.dumps(after["status"]["remote"])) == obj["status"]["remote"]

    # deletionPolicy Retain (the default) needs no finalizer: deleting such an object keeps the tier and
    # never waits for the operator.
    assert "tierkeeper.io/remote-tier" not in (after["metadata"].get("finalizers") or [])
    # deletionPolicy Delete: the next round puts the finalizer on; deleting the TieredTopic then removes
    # the topic's remote tier, then the object.
    plane.rest().call(
        "PATCH",
        f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredtopics/orders",
        {"spec": {"deletionPolicy": "Delete"}},
        content_type="application/merge-patch+json",
    )
    reconciler.run_round()
    held = plane.request("GET", f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredtopics/orders")
    assert "tierkeeper.io/remote-tier" in held["metadata"]["finalizers"]
    plane.request("DELETE", f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredtopics/orders")
    gone = False
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline and not gone:
        reconciler.run_round()
        names = [
            o["metadata"]["name"]
            for o in plane.request("GET", f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredtopics")[
                "items"
            ]
        ]
        gone = "orders" not in names
        time.sleep(1)
    assert gone, plane.request("GET", f"/api/v1/namespaces/{ns}/events")["items"][-3:]
    fs.invalidate_cache()
    leftover = [k for k in fs.find(f"{bucket}/tier") if "/orders" in k]
    assert leftover == [], leftover[:5]
