"""Rebuild through Kubernetes, on the harness control plane with a real 3-broker Kafka (RF 3, tiered topic):

1. The init container path. The operator's round writes the rebuild settings ConfigMap; broker 3's volume
   is wiped down to meta.properties; a pod named ``kafka-3`` with the documented init container
   (``tierkeeper rebuild --if-empty --settings ... --broker-id-from-pod-name $(POD_NAME)``) runs on the
   process kubelet. Its first run is killed (SIGKILL at a named fault point, mid-restore); the kubelet
   restarts it and the second run completes the restore. Broker 3 is started only once the init container
   exited 0, as a kubelet starts the pod's main container (the pod's main container stands in for Kafka,
   which the harness runs itself). It rejoins the ISR of every partition at the leaders' log end, with no
   ``-stray`` dir, no restored byte truncated, and only the untiered tail replicated. The operator's next
   round reports the init container's result in status.rebuild and an Event.
2. The rebuild Job: requested with ``tierkeeper.io/rebuild: run`` while a pod writes to the volume, it
   waits (status Blocked, a Warning naming the pod, Reconciling); once the broker is held (its pod gone) the
   operator runs it, and its result reaches the status.
3. A refused restore fails the init container: the broker's container never starts, and the TieredBroker
   is Stalled (RebuildFailed) with a Warning Event.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s.test_k8s_operator_real import kstatus, log_dir_claims, resource

from harness.control_plane import ControlPlane
from harness.k8s import load_crds
from harness.kafka import KafkaCluster
from harness.kafka_dist import HarnessError
from harness.kube_rest import ApiError
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.rebuild_settings import SETTINGS_KEY, load_settings, settings_config_map_name
from storage_core.formats.segment_files import parse_partition_dir_name
from storage_core.rebuild.state import MARKER, STAGING_DIR, RebuildMarker
from storage_core.reconcile.rebuild import INIT_CONTAINER, REQUEST_ANNOTATION, decode_result
from tierkeeper_operator.compose import build_reconciler
from tierkeeper_operator.kube import Kube
from tierkeeper_operator.loop import Reconciler

from .real import (
    REBUILT,
    batches_from,
    create_topic,
    log_files,
    produce,
    server_log_since_last_start,
    stop_and_wipe,
    tier,
    wait_in_sync,
)

pytestmark = pytest.mark.kafka

TOPIC = "orders"
PARTITIONS = 3
DEADLINE = 300.0  # pods start Python processes on a busy 2-core machine
MOUNT = "/var/lib/kafka/data"
SETTINGS_DIR = "/etc/tierkeeper/rebuild"
# Test-only: the first run of the init container (no flag file yet in the pod's emptyDir) is killed at the
# fifth restored file; every later run (the kubelet's restart) runs clean. The shell stays the
# container's PID 1 and exits 137 like its killed child (a tierkeeper that was PID 1 itself would also
# end there: the fault hook then exits with 137, since PID 1 cannot SIGKILL itself).
KILL_FIRST_RUN = (
    "if [ ! -e /scratch/killed-once ]; then touch /scratch/killed-once; "
    'export TIERKEEPER_FAULT=rebuild.file.restored:5; fi; tierkeeper "$@"; exit $?'
)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(tmp_path_factory.mktemp("pod-path-kafka"), brokers=3)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def remote(kafka: KafkaCluster) -> Iterator[str]:
    # Not under /tmp: the operator's Jobs mount an emptyDir there, which would hide a file:// tier.
    root = Path(tempfile.mkdtemp(prefix="tierkeeper-pod-path-", dir="/var/tmp"))
    try:
        url = f"file://{root}"
        create_topic(kafka, TOPIC, PARTITIONS)
        produce(kafka, TOPIC, PARTITIONS, 1_200_000, seed=11)
        tier(kafka, url, TOPIC)
        produce(kafka, TOPIC, PARTITIONS, 200_000, seed=12)  # the untiered tail
        yield url
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _setup(plane: ControlPlane, ns: str, kafka: KafkaCluster, remote: str, pod_name: str) -> Reconciler:
    plane.apply_crds(load_crds())
    log_dir_claims(plane, ns, kafka)
    for broker in kafka.node_ids:
        spec = {
            "clusterRef": {"name": "local"},
            "brokerId": broker,
            "logDir": {"claimName": f"data-{broker}", "mountPath": MOUNT, "path": MOUNT},
            "placement": {"podName": pod_name if broker == REBUILT else f"kafka-{broker}"},
            "rebuild": {"policy": "WhenLogDirEmpty", "parallelism": 2, "runAsUser": 0, "runAsGroup": 0},
        }
        plane.request(
            "POST",
            f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredbrokers",
            resource("TieredBroker", f"broker-{broker}", spec),
        )
    cluster = KafkaClusterConfig.model_validate(
        {
            "name": "local",
            "bootstrapServers": kafka.bootstrap_servers,
            "remote": {"url": remote},
            "jobs": {"image": "tierkeeper", "backoffLimit": 0},
        }
    )
    return build_reconciler(Kube(plane.api_client(), (ns,)), {"local": cluster})


def _broker(plane: ControlPlane, ns: str, name: str = f"broker-{REBUILT}") -> dict[str, Any]:
    found: dict[str, Any] = plane.request(
        "GET", f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredbrokers/{name}"
    )
    return found


def _until(what: str, probe: Callable[[], Any], reconciler: Reconciler | None = None) -> Any:
    deadline = time.monotonic() + DEADLINE
    while True:
        if reconciler is not None:
            reconciler.run_round()
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


def _pod(plane: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    try:
        pod: dict[str, Any] = plane.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise
    return pod


def broker_pod(name: str, *, kill_first_run: bool, remote: str) -> dict[str, Any]:
    """The broker pod as docs/rebuild.md shows it: the init container, then the broker's container (here a
    stand-in: the harness runs Kafka itself once the init container has exited 0). The file:// tier
    (``remote``) is mounted where its URL points, as a container sees nothing of the host otherwise."""
    tier = remote.removeprefix("file://")
    init: dict[str, Any] = {
        "name": INIT_CONTAINER,
        "image": "tierkeeper/pipeline:0.1.0",
        "args": [
            "rebuild",
            "--if-empty",
            "--settings",
            f"{SETTINGS_DIR}/{SETTINGS_KEY}",
            "--broker-id-from-pod-name",
            "$(POD_NAME)",
            "--result-file",
            "/dev/termination-log",
            "--json",
        ],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "securityContext": {"runAsUser": 0},  # the broker's user; the harness's Kafka runs as root
        "volumeMounts": [
            {"name": "data", "mountPath": MOUNT},
            {"name": "rebuild-settings", "mountPath": SETTINGS_DIR, "readOnly": True},
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "tier", "mountPath": tier, "readOnly": True},
        ],
    }
    if kill_first_run:
        init["command"] = ["/bin/sh", "-c", KILL_FIRST_RUN, "sh"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 1,
            "initContainers": [init],
            "containers": [
                {
                    "name": "kafka",
                    "image": "python",
                    "command": ["sleep", "3600"],
                    "volumeMounts": [{"name": "data", "mountPath": MOUNT}],
                }
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{REBUILT}"}},
                {"name": "rebuild-settings", "configMap": {"name": settings_config_map_name("local")}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "tier", "hostPath": {"path": tier, "type": "Directory"}},
            ],
        },
    }


def _restored(data: Path) -> tuple[dict[str, dict[str, bytes]], dict[str, int]]:
    """The restored segment files per partition dir and each partition's restored end (from the marker)."""
    marker = RebuildMarker.model_validate_json((data / MARKER).read_bytes())
    ends = {p.dir_name: p.restored_end for p in marker.partitions if p.restored_end is not None}
    files = {d.name: log_files(d) for d in data.iterdir() if d.is_dir() and parse_partition_dir_name(d.name)}
    return files, ends


def _check_rejoined(kafka: KafkaCluster, before: dict[str, dict[str, bytes]], ends: dict[str, int]) -> None:
    wait_in_sync(kafka, [TOPIC], timeout=DEADLINE)
    data = kafka.log_dir(REBUILT)
    assert not [n for n in os.listdir(data) if n.endswith("-stray")]
    log = server_log_since_last_start(kafka, REBUILT)
    assert "stray" not in log.lower()
    assert sorted(before) == [f"{TOPIC}-{p}" for p in range(PARTITIONS)]
    replicated_total = 0
    for name, files in before.items():
        # The follower fetched from the end of what was restored (not from 0 after truncating it) ...
        assert f"Follower {name} starts at leader epoch " in log and f"from offset {ends[name]} " in log, name
        last = max(files)
        for file_name, content in files.items():
            now = (data / name / file_name).read_bytes()
            assert now == content if file_name != last else now.startswith(content), f"{name}/{file_name}"
        # ... and got exactly the leaders' batches from there on: the untiered tail, nothing restored again.
        replicated = sum(len(b) for b in log_files(data / name).values()) - sum(
            len(b) for b in files.values()
        )
        tail_bytes, _ = batches_from(kafka.log_dir(1) / name, ends[name])
        assert replicated == tail_bytes > 0, name
        replicated_total += replicated
    assert replicated_total < sum(len(b) for f in before.values() for b in f.values())


def test_init_container_restores_before_the_broker_starts_and_survives_a_kill(
    k8s_control_plane: ControlPlane, k8s_namespace: str, kafka: KafkaCluster, remote: str, container_mode: str
) -> None:
    """The init container runs from the built pipeline image (the kubelet's container mode)."""
    plane, ns = k8s_control_plane, k8s_namespace
    pod_name = f"kafka-{REBUILT}"
    reconciler = _setup(plane, ns, kafka, remote, pod_name)
    reconciler.run_round()
    config_map = plane.request(
        "GET", f"/api/v1/namespaces/{ns}/configmaps/{settings_config_map_name('local')}"
    )
    settings = load_settings(config_map["data"][SETTINGS_KEY], "configmap")
    assert settings.for_broker(REBUILT) is not None and settings.remote.url == remote
    assert sorted(settings.brokers) == ["1", "2", "3"]

    stop_and_wipe(kafka)
    plane.request(
        "POST", f"/api/v1/namespaces/{ns}/pods", broker_pod(pod_name, kill_first_run=True, remote=remote)
    )

    def init_done() -> dict[str, Any] | None:
        pod = _pod(plane, ns, pod_name) or {}
        for entry in (pod.get("status") or {}).get("initContainerStatuses") or []:
            terminated = (entry.get("state") or {}).get("terminated")
            if terminated and terminated.get("exitCode") == 0:
                return dict(entry)
            assert not terminated or entry.get("restartCount", 0) < 3, entry
        # The broker's container must not run before the restore finished.
        assert pod.get("status", {}).get("phase") in (None, "Pending"), pod.get("status")
        return None

    try:
        entry = _until("the init container to exit 0", init_done)
    except AssertionError:
        raise AssertionError(plane.kubelet.logs(ns, pod_name, INIT_CONTAINER)[-3000:]) from None
    assert entry["restartCount"] == 1 and entry["lastState"]["terminated"]["exitCode"] == 137, entry
    result = decode_result(entry["state"]["terminated"].get("message"))
    assert result.failure is None and result.action == "resumed", entry
    assert result.partitions_restored == PARTITIONS and result.expected_tail > 0
    data = kafka.log_dir(REBUILT)
    assert STAGING_DIR not in os.listdir(data)
    before, ends = _restored(data)

    try:
        kafka.start_broker(REBUILT)  # what the kubelet does next: the main container
    except HarnessError as exc:
        raise AssertionError(str(exc)[-3000:]) from None
    _check_rejoined(kafka, before, ends)

    def reported() -> dict[str, Any] | None:
        status = (_broker(plane, ns).get("status") or {}).get("rebuild")
        return status if status and status.get("phase") == "Succeeded" else None

    status = _until("status.rebuild", reported, reconciler)
    assert status["source"] == "InitContainer" and status["pod"] == pod_name and status["action"] == "resumed"
    assert status["partitionsRestored"] == PARTITIONS and status["bytesRestored"] > 0
    assert status["expectedTail"] == result.expected_tail
    events = plane.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    assert "RebuildSucceeded" in {e["reason"] for e in events}
    assert kstatus(_broker(plane, ns)) == "Current"
    plane.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod_name}")
    _until("the pod to go", lambda: _pod(plane, ns, pod_name) is None)


def test_a_requested_rebuild_job_waits_while_a_pod_writes_to_the_volume(
    k8s_control_plane: ControlPlane, k8s_namespace: str, kafka: KafkaCluster, remote: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    pod_name = f"holder-{REBUILT}"
    reconciler = _setup(plane, ns, kafka, remote, pod_name)
    reconciler.run_round()  # the settings ConfigMap the pod mounts
    # The broker still runs, and a pod of it holds the volume read-write (no init container here).
    holder = broker_pod(pod_name, kill_first_run=False, remote=remote)
    holder["spec"]["initContainers"] = []
    plane.request("POST", f"/api/v1/namespaces/{ns}/pods", holder)
    _until(
        "the holder to run",
        lambda: ((_pod(plane, ns, pod_name) or {}).get("status") or {}).get("phase") == "Running",
    )
    plane.rest().call(
        "PATCH",
        f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredbrokers/broker-{REBUILT}",
        {"metadata": {"annotations": {REQUEST_ANNOTATION: "run"}}},
        content_type="application/merge-patch+json",
    )

    def blocked() -> dict[str, Any] | None:
        status = (_broker(plane, ns).get("status") or {}).get("rebuild")
        return status if status and status.get("phase") == "Blocked" else None

    status = _until("a Blocked rebuild", blocked, reconciler)
    assert pod_name in status["message"]
    assert reconciler.run_round().created == []
    obj = _broker(plane, ns)
    assert obj["metadata"]["annotations"][REQUEST_ANNOTATION] == "run"  # the request still stands
    assert kstatus(obj) == "InProgress"
    jobs = plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    assert jobs == []
    events = plane.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    assert any(e["reason"] == "RebuildBlocked" and pod_name in e["message"] for e in events)

    # The user holds the broker: it stops, its pod goes, its disk is replaced.
    plane.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod_name}")
    _until("the holder to go", lambda: _pod(plane, ns, pod_name) is None)
    stop_and_wipe(kafka)

    def finished() -> dict[str, Any] | None:
        status = (_broker(plane, ns).get("status") or {}).get("rebuild")
        return status if status and status.get("phase") in ("Succeeded", "Failed", "Skipped") else None

    status = _until("the rebuild Job's result", finished, reconciler)
    logs = ""
    if status["phase"] != "Succeeded":
        pods = plane.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        logs = json.dumps([p.get("status") for p in pods])[-3000:]
    assert status["phase"] == "Succeeded" and status["source"] == "Job" and status["action"] == "rebuilt", (
        status,
        logs,
    )
    assert status["job"] and status["partitionsRestored"] == PARTITIONS
    assert REQUEST_ANNOTATION not in (_broker(plane, ns)["metadata"].get("annotations") or {})
    jobs = plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    assert [j["metadata"]["name"] for j in jobs] == [status["job"]]
    job_pod = plane.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name%3D{status['job']}")[
        "items"
    ][0]
    assert job_pod["spec"]["volumes"][1]["persistentVolumeClaim"] == {"claimName": f"data-{REBUILT}"}
    before, ends = _restored(kafka.log_dir(REBUILT))
    kafka.start_broker(REBUILT)
    _check_rejoined(kafka, before, ends)
    assert kstatus(_broker(plane, ns)) == "Current"


def test_a_failing_init_container_keeps_the_broker_down_and_stalls_its_tieredbroker(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    """A refused restore (here: the volume's meta.properties is another node's) fails the init container;
    the kubelet retries it, the broker's container never starts, and the TieredBroker says why."""
    plane, ns = k8s_control_plane, k8s_namespace
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "meta.properties").write_text("version=1\nnode.id=9\ncluster.id=x\ndirectory.id=y\n")
    (tmp_path / "tier").mkdir()  # an (empty) tier that exists: the refusal comes from the volume
    plane.apply_crds(load_crds())
    plane.request(
        "POST",
        "/api/v1/persistentvolumes",
        {
            "metadata": {"name": f"{ns}-data-{REBUILT}"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "manual",
                "hostPath": {"path": str(volume)},
                "claimRef": {"namespace": ns, "name": f"data-{REBUILT}"},
            },
        },
    )
    plane.request(
        "POST",
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {
            "metadata": {"name": f"data-{REBUILT}"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "manual",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    spec = {
        "clusterRef": {"name": "local"},
        "brokerId": REBUILT,
        "logDir": {"claimName": f"data-{REBUILT}", "mountPath": MOUNT, "path": MOUNT},
        "placement": {"podName": f"kafka-{REBUILT}"},
        "rebuild": {"policy": "WhenLogDirEmpty"},
    }
    plane.request(
        "POST",
        f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredbrokers",
        resource("TieredBroker", f"broker-{REBUILT}", spec),
    )
    cluster = KafkaClusterConfig.model_validate(
        {"name": "local", "bootstrapServers": "127.0.0.1:9", "remote": {"url": f"file://{tmp_path / 'tier'}"}}
    )
    reconciler = build_reconciler(Kube(plane.api_client(), (ns,)), {"local": cluster})
    reconciler.run_round()
    pod_name = f"kafka-{REBUILT}"
    pod = broker_pod(pod_name, kill_first_run=False, remote=f"file://{tmp_path / 'tier'}")
    plane.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)

    def failed() -> dict[str, Any] | None:
        status = (_broker(plane, ns).get("status") or {}).get("rebuild")
        return status if status and status.get("phase") == "Failed" else None

    status = _until("a Failed rebuild", failed, reconciler)
    assert status["source"] == "InitContainer" and "node.id 9" in status["message"], status
    obj = _broker(plane, ns)
    assert kstatus(obj) == "Failed"
    assert {c["type"]: c["reason"] for c in obj["status"]["conditions"]}["Stalled"] == "RebuildFailed"
    events = plane.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    assert any(e["reason"] == "RebuildFailed" and e["type"] == "Warning" for e in events)
    pod = _pod(plane, ns, pod_name) or {}
    assert pod["status"]["phase"] == "Pending"
    assert not (pod["status"].get("containerStatuses") or [{}])[0].get("started")
    with pytest.raises(HarnessError):
        plane.kubelet.logs(ns, pod_name, "kafka")  # the broker's container never ran
    assert sorted(os.listdir(volume)) == ["meta.properties"]  # refused before touching anything
    plane.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod_name}")
    _until("the pod to go", lambda: _pod(plane, ns, pod_name) is None)
