"""The chart end to end on the harness control plane: `helm install` with a real Kafka broker and moto S3,
watching one namespace that enforces the `restricted` Pod Security level. The operator in the chart's pod
(its Role only) reconciles a TieredTopic to Ready through copy and cleanup Jobs that run the chart's
pipeline image; every request it made is in the API server's audit log, granted and not refused.

Every pod runs in the kubelet's container mode: the operator and its Jobs are the images `make images`
built (tierkeeper/operator, tierkeeper/pipeline), as user 10001 with a read-only root filesystem and no
capabilities, as the chart and the Jobs ask and the restricted profile admits."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import s3fs
import yaml
from k8s_helpers import unique
from test_k8s_helm import (
    CHART,
    RESTRICTED,
    granted,
    helm,
    operator_pods,
    requests_of,
    running_pod,
)
from test_k8s_operator_real import moto_remote, orders_topic, resource, tier_storage, tiered_broker_spec

from harness.control_plane import ControlPlane
from harness.k8s import load_crds
from harness.kafka import KafkaCluster
from harness.kafka_dist import HarnessError
from harness.kstatus import kstatus_live
from harness.kube_rest import ApiError
from harness.moto_s3 import MotoServer
from harness.ports import free_ports
from tierkeeper_operator import GROUP, VERSION
from tierkeeper_operator.jobs import LABEL_KIND

DEADLINE = 300.0  # the operator pod, then its Jobs' pods, start Python processes on a busy 2-core machine
# A Spark Job's container starts a JVM and a local Spark before any work: a trivial job took 5 minutes
# in the pipeline image on this 2-core machine under a load average of 60.
SPARK_DEADLINE = 900.0


def test_chart_operator_tiers_a_topic_through_jobs_in_a_restricted_namespace(
    k8s_control_plane: ControlPlane,
    kafka_cluster_factory: Callable[..., KafkaCluster],
    moto_server: MotoServer,
    tmp_path: Path,
    container_mode: str,
) -> None:
    plane = k8s_control_plane
    plane.apply_crds(load_crds())
    release, system, ns = unique("tk"), unique("tierkeeper-system"), unique("kafka")
    plane.create_namespace(system, labels=RESTRICTED)
    plane.create_namespace(ns, labels=RESTRICTED)
    kafka = kafka_cluster_factory(1)
    orders_topic(kafka, 2, 1, 2000)
    bucket, options = tier_storage(plane, ns, kafka, moto_server)
    cluster = {
        "name": "local",
        "bootstrapServers": kafka.bootstrap_servers,
        "remote": moto_remote(bucket, options),
        "jobs": {"backoffLimit": 0},
    }
    probes, readiness, metrics = free_ports(3)
    values = tmp_path / "values.yaml"
    settings = {
        "clusters": [cluster],
        "watchNamespaces": [ns],
        "reconcileIntervalSeconds": 5,
        "probes": {"port": probes, "readiness": {"port": readiness}},
        "metrics": {"port": metrics},
        "jobDefaults": {"ttlSecondsAfterFinished": 600},
    }
    values.write_text(yaml.safe_dump(settings))
    (broker,) = kafka.node_ids
    broker_spec = tiered_broker_spec("local", broker, plane.kubelet.node_names[0])
    topic_spec = {
        "clusterRef": {"name": "local"},
        "topic": "orders",
        "localRetentionMs": -1,
        "localRetentionBytes": 128 * 1024,
        "copy": {"intervalSeconds": 10},
        "cleanup": {"intervalSeconds": 10},
        # An Iceberg table kept current: export Jobs (Spark local[*] in the pipeline image) after copies.
        "table": {"location": f"s3://{bucket}/tables/orders"},
    }
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}"
    try:
        helm(plane, "install", release, str(CHART), "-n", system, "--values", str(values), "--take-ownership")
        pod = running_pod(plane, system, release)
        plane.request("POST", f"{base}/tieredbrokers", resource("TieredBroker", "broker", broker_spec))
        plane.request("POST", f"{base}/tieredtopics", resource("TieredTopic", "orders", topic_spec))

        deadline = time.monotonic() + SPARK_DEADLINE  # the export Job starts Spark
        obj: dict[str, Any] = {}
        while time.monotonic() < deadline:
            obj = plane.request("GET", f"{base}/tieredtopics/orders")
            status = obj.get("status") or {}
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
            exported = ((status.get("table") or {}).get("lastExport") or {}).get("result")
            if status.get("lastCopy") and status.get("lastCleanup") and exported and ready:
                break
            time.sleep(2)
        status = obj.get("status") or {}
        log = plane.kubelet.logs(system, pod["metadata"]["name"], "operator")
        assert status.get("lastCopy", {}).get("result") == "Succeeded", (
            status,
            job_logs(plane, ns),
            log[-3000:],
        )
        assert status.get("lastCleanup", {}).get("result") == "Succeeded", (status, job_logs(plane, ns))
        table = status.get("table") or {}
        assert table.get("lastExport", {}).get("result") == "Succeeded", (status, job_logs(plane, ns))
        assert table.get("snapshotId") and table.get("rows"), table
        (verdict,) = kstatus_live(plane.kubeconfig, f"{GROUP}/{VERSION}/tieredtopics", ns, "orders")
        assert verdict.status == "Current", verdict

        # The Jobs ran the chart's pipeline image, as the restricted profile the namespace enforces allows.
        jobs = plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
        assert {j["metadata"]["labels"][LABEL_KIND] for j in jobs} >= {"copy", "cleanup", "export"}
        for job in jobs:
            (container,) = job["spec"]["template"]["spec"]["containers"]
            assert container["image"].startswith("tierkeeper/pipeline:"), container["image"]
            assert job["spec"]["ttlSecondsAfterFinished"] == 600 and job["spec"]["backoffLimit"] == 0
        # ... as containers of the built images, the operator's too.
        ran = plane.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        ran.append(plane.request("GET", f"/api/v1/namespaces/{system}/pods/{pod['metadata']['name']}"))
        for entry in [e for each in ran for e in each["status"]["containerStatuses"]]:
            assert entry["containerID"].startswith(f"{container_mode}://"), entry
            assert ":inputs-" in entry["imageID"], entry
        assert s3fs.S3FileSystem(**options).find(f"{bucket}/tier"), "nothing in S3"

        # Every request of the operator (its Role in the watched namespace only) was granted, with kopf's
        # cluster-scope discovery off. Job creation, pods and events were among them.
        made = requests_of(plane, system, pod["spec"]["serviceAccountName"])
        refused = {key for key, codes in made.items() if 403 in codes}
        assert not refused, sorted(refused)
        assert made.keys() - refused <= granted(clusterwide=False), sorted(
            made.keys() - granted(clusterwide=False)
        )
        assert {("create", "batch", "jobs"), ("list", "", "pods"), ("create", "", "events")} <= made.keys()

        # The same release with its cleanups on Spark (local[*] in the Job's pod: the pipeline image's JVM,
        # its scratch space in the pod's /tmp): the next cleanup Job runs `--engine spark` and succeeds.
        cluster["jobs"] = {"backoffLimit": 0, "cleanupEngine": "spark"}
        values.write_text(yaml.safe_dump(settings))
        helm(plane, "upgrade", release, str(CHART), "-n", system, "--values", str(values))
        running_pod(plane, system, release, replacing=pod["metadata"]["name"])
        spark_job = wait_for_spark_cleanup(plane, ns)
        assert spark_job["status"].get("succeeded") == 1, (spark_job["status"], job_logs(plane, ns))

        helm(plane, "uninstall", release, "-n", system)
        assert wait_gone(plane, system, release), "the operator pod outlived the release"
    finally:
        plane.apply_crds(load_crds())
        for namespace in (system, ns):
            try:
                plane.request("DELETE", f"/api/v1/namespaces/{namespace}")
            except ApiError:
                pass


def wait_for_spark_cleanup(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    """The first cleanup Job with ``--engine spark`` once it finished (succeeded or failed)."""

    def probe() -> dict[str, Any] | None:
        for job in plane.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]:
            (container,) = job["spec"]["template"]["spec"]["containers"]
            status = job.get("status") or {}
            if "spark" in container.get("args", []) and (status.get("succeeded") or status.get("failed")):
                return dict(job)
        return None

    from harness.k8s import wait_until

    job = wait_until(probe, SPARK_DEADLINE, interval=2)
    assert job, ("no cleanup Job with --engine spark finished", job_logs(plane, namespace))
    return dict(job)


def wait_gone(plane: ControlPlane, namespace: str, release: str) -> bool:
    from harness.k8s import wait_until

    return bool(wait_until(lambda: not operator_pods(plane, namespace, release), 120))


def job_logs(plane: ControlPlane, namespace: str) -> dict[str, str]:
    logs = {}
    for pod in plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]:
        name = pod["metadata"]["name"]
        try:
            logs[name] = plane.kubelet.logs(namespace, name, "tierkeeper")[-2000:]
        except HarnessError as exc:
            logs[name] = f"{exc}; status {pod.get('status')}"
    return logs
