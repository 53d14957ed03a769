"""The campaign with the operator as its reconciler (``python -m campaign.runner --operator``, opt-in, not
in ``make test``): the chart installed by Helm on the harness control plane (the process kubelet runs the
operator's pod and its copy and cleanup Jobs' pods from the checkout), a TieredCluster naming the
campaign's Kafka and the bucket behind the fault proxy, a TieredBroker per broker (its log dir a hostPath
volume) and a TieredTopic per round topic.

What changes against standalone mode: a step's reconcile is "every live TieredTopic has a copy and a
cleanup Job created after the step began, both ended"; the reconciler-kill fault becomes a Job's pod
deleted through the API while its process is stopped at the fault point (``TIERKEEPER_FAULT=...:stop`` in
the Jobs' environment, so the pod is provably mid-copy when Kubernetes kills it); between rounds the
operator is scaled to 0 and its Jobs are drained, so the checks' own cleanup and orphan sweep never race
a copy (the standalone round has the same quiet by construction). Two faults exist only here: both
operator replicas killed at a moment of a step, and a ``deletionPolicy: Delete`` TieredTopic deleted
(``plan.OPERATOR_KINDS``)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from campaign.system import CampaignSystem, ReconcileResult
from harness.control_plane import ControlPlane
from harness.k8s import load_crds
from harness.kube_rest import ApiError
from harness.moto_s3 import DUMMY_KEY, DUMMY_SECRET, MotoServer
from harness.paths import REPO_ROOT
from harness.ports import free_ports
from harness.tools import run_tool

CHART = REPO_ROOT / "charts" / "tierkeeper"
NAMESPACE = "campaign"
SYSTEM_NAMESPACE = "tierkeeper-system"
RELEASE = "campaign"
API = f"/apis/tierkeeper.io/v1alpha1/namespaces/{NAMESPACE}"
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
INTERVAL_S = 10
"""The TieredTopics' copy and cleanup interval (the API's minimum)."""
ROUND_DEADLINE = 900.0
"""A step's copy and cleanup Jobs on this loaded 2-core machine (each Job's pod starts a Python process)."""
STOP_DEADLINE = 300.0
"""For a Job to reach the fault point and stop there; not reaching it is an event, as in standalone."""
REPLICAS = 2
"""The operator's replicas (kopf peering: one active, one standby), so the operator kill kills both."""
PEERING_LIFETIME_S = 20
"""How long a killed replica's keep-alive holds its successors back (the chart's default is 60 s)."""
KIND_LABEL = "tierkeeper.io/job-kind"
WORK_ANNOTATION = "tierkeeper.io/work"


def _rfc3339(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


@dataclass
class OperatorSystem(CampaignSystem):
    plane: ControlPlane | None = None
    pods_deleted: int = 0
    operator_kills: int = 0
    tiered_deleted: dict[str, str | None] = field(default_factory=dict)
    """A deleted ``deletionPolicy: Delete`` TieredTopic's topic -> the topic id its status named."""

    @classmethod
    def start_with_operator(cls, workdir: Path, moto: MotoServer, plane: ControlPlane) -> OperatorSystem:
        system = cls.start(workdir, moto)
        assert isinstance(system, OperatorSystem)
        system.plane = plane
        try:
            system._install()
        except BaseException:
            system.stop()
            raise
        return system

    # ---- the chart, the TieredCluster and the brokers -------------------------------------------
    def _install(self) -> None:
        plane = self._plane()
        plane.apply_crds(load_crds())
        plane.create_namespace(NAMESPACE)
        plane.create_namespace(SYSTEM_NAMESPACE)
        self._set_job_env({})
        for node in self.cluster.node_ids:
            self._log_dir_claim(node)
        cluster = {
            "bootstrapServers": self.cluster.bootstrap_servers,
            "remote": {
                "url": self.remote,
                "storageOptions": self.storage_options(),
                "storageOptionsSecretRef": {"name": "s3"},
            },
            "jobs": {"image": "tierkeeper", "backoffLimit": 0, "ttlSecondsAfterFinished": 3600},
        }
        plane.request("POST", f"{API}/tieredclusters", _resource("TieredCluster", "campaign", cluster))
        probes, readiness, metrics = free_ports(3)
        values = self.workdir / "values.yaml"
        values.write_text(
            yaml.safe_dump(
                {
                    "watchNamespaces": [NAMESPACE],
                    "reconcileIntervalSeconds": 5,
                    "replicaCount": REPLICAS,
                    "peering": {"lifetimeSeconds": PEERING_LIFETIME_S},
                    "probes": {"port": probes, "readiness": {"port": readiness}},
                    "metrics": {"port": metrics},
                }
            )
        )
        # --take-ownership: the CRDs were applied above (as tests/k8s does), so the release adopts them.
        self._helm(
            "install",
            RELEASE,
            str(CHART),
            "-n",
            SYSTEM_NAMESPACE,
            "--values",
            str(values),
            "--take-ownership",
        )
        self._write_manifests()

    def _helm(self, *args: str) -> str:
        plane = self._plane()
        return run_tool("helm", ["--kubeconfig", str(plane.kubeconfig), *args], timeout=600).stdout

    def _plane(self) -> ControlPlane:
        if self.plane is None:
            raise AssertionError("the operator's control plane is not attached")
        return self.plane

    def _log_dir_claim(self, node: int) -> None:
        plane = self._plane()
        pv = {
            "metadata": {"name": f"campaign-data-{node}"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "manual",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(self.cluster.log_dir(node))},
                "claimRef": {"namespace": NAMESPACE, "name": f"data-{node}"},
            },
        }
        plane.request("POST", "/api/v1/persistentvolumes", pv)
        claim = {
            "metadata": {"name": f"data-{node}"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "manual",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        plane.request("POST", f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims", claim)

    def _set_job_env(self, extra: dict[str, str]) -> None:
        """The ``s3`` Secret the Jobs take their environment from: the bucket's keys, plus ``extra``."""
        plane = self._plane()
        body = {
            "metadata": {"name": "s3"},
            "stringData": {"AWS_ACCESS_KEY_ID": DUMMY_KEY, "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET, **extra},
        }
        try:
            plane.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/secrets/s3")
        except ApiError as exc:
            if exc.code != 404:
                raise
        plane.request("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets", body)

    # ---- the resources: the standalone manifests, applied to the API server ----------------------
    def _write_manifests(self) -> None:
        super()._write_manifests()
        if self.plane is None:
            return  # still starting: the chart is not installed yet
        docs = list(yaml.safe_load_all((self.workdir / "manifests" / "all.yaml").read_text()))
        for doc in docs:
            doc["metadata"]["namespace"] = NAMESPACE
            if doc["kind"] == "TieredBroker":
                node, path = doc["spec"]["brokerId"], "/var/lib/kafka/data"
                doc["spec"]["logDir"] = {"claimName": f"data-{node}", "mountPath": path, "path": path}
                doc["spec"]["placement"] = {"nodeName": self.plane.kubelet.node_names[0]}
            else:
                doc["spec"]["copy"] = {"intervalSeconds": INTERVAL_S}
                doc["spec"]["cleanup"] = {"intervalSeconds": INTERVAL_S}
        for plural, kind in (("tieredbrokers", "TieredBroker"), ("tieredtopics", "TieredTopic")):
            wanted = {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}
            present = {o["metadata"]["name"] for o in self.plane.request("GET", f"{API}/{plural}")["items"]}
            for name in present - wanted.keys():
                try:
                    self.plane.request("DELETE", f"{API}/{plural}/{name}")
                except ApiError as exc:
                    if exc.code != 404:  # a Delete TieredTopic may go (its finalizer released) meanwhile
                        raise
            for name in wanted.keys() - present:
                self.plane.request("POST", f"{API}/{plural}", wanted[name])

    # ---- a step's reconcile ----------------------------------------------------------------------
    def reconcile(self, *, fault: str | None = None, kill_operator_at: str | None = None) -> ReconcileResult:
        """Copy and cleanup Jobs created after this call began have ended for every live TieredTopic;
        ``fault`` (``point:n``): a Job's pod stopped there is deleted through the API first;
        ``kill_operator_at`` (one of ``plan.OPERATOR_MOMENTS``): every operator pod is killed then, and
        the round ends only once the Deployment's new pods run."""
        began = time.time()
        self.reconcile_started_ms = int(began * 1000)
        self._operator_replicas(REPLICAS)
        events: list[str] = []
        dead: set[str] = set()
        if kill_operator_at is not None:
            event, dead = self._kill_operator(kill_operator_at, began)
            events.append(event)
        killed = self._delete_a_pod_at(fault) if fault else None
        deadline = time.monotonic() + ROUND_DEADLINE
        statuses: dict[str, Any] = {}
        while time.monotonic() < deadline:
            self._delete_stopped_pods()
            statuses = {
                f"{NAMESPACE}/{o['metadata']['name']}": o.get("status") or {}
                for o in self._plane().request("GET", f"{API}/tieredtopics")["items"]
                if o["metadata"]["name"] in self.topics
            }
            if (
                len(statuses) == len(self.topics)
                and all(self._ran_since(status, began) for status in statuses.values())
                and not self._active_jobs(created_before=began)
                and (not dead or self._replaced(dead, events))
            ):
                ready = all(_ready(status) for status in statuses.values())
                return ReconcileResult(0 if ready else 1, killed, statuses, events=events)
            time.sleep(2)
        return ReconcileResult(
            1,
            killed,
            statuses,
            f"no copy and cleanup Jobs ended (or the operator not back) within {ROUND_DEADLINE}s",
            events,
        )

    # ---- the operator killed, a TieredTopic deleted ----------------------------------------------
    def _operator_pods(self) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance%3D{RELEASE}"
        path = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods?labelSelector={selector}"
        return [
            p
            for p in self._plane().request("GET", path)["items"]
            if not p["metadata"].get("deletionTimestamp")
        ]

    def _step_jobs(self, kind: str, began: float) -> list[dict[str, Any]]:
        return [
            j
            for j in self._plane().request("GET", JOBS)["items"]
            if (j["metadata"].get("labels") or {}).get(KIND_LABEL) == kind
            and _rfc3339(j["metadata"]["creationTimestamp"]) >= began - 1
        ]

    def _kill_operator(self, moment: str, began: float) -> tuple[str, set[str]]:
        """Delete every pod of the operator's Deployment with no grace period (the kubelet SIGKILLs its
        process) once ``moment`` has come: its replicas running (``step_start``), or the step's first copy
        (cleanup) Job created (``copy_job``, ``cleanup_job``): an event, never a time. Returns the event
        and the pods killed."""
        plane = self._plane()
        deadline = time.monotonic() + STOP_DEADLINE
        while True:
            if moment == "step_start":
                running = [p for p in self._operator_pods() if p["status"].get("phase") == "Running"]
                due = len(running) >= REPLICAS
            else:
                due = bool(self._step_jobs("copy" if moment == "copy_job" else "cleanup", began))
            if due:
                break
            if time.monotonic() > deadline:
                return (
                    f"operator kill at {moment}: the moment did not come within {STOP_DEADLINE:.0f}s",
                    set(),
                )
            time.sleep(0.5)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        dead = set()
        for pod in self._operator_pods():
            name = pod["metadata"]["name"]
            try:
                plane.request("DELETE", f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods/{name}", body)
            except ApiError as exc:
                if exc.code != 404:
                    raise
                continue
            dead.add(name)
        self.operator_kills += 1
        return f"operator pods {sorted(dead)} killed at {moment}", dead

    def _replaced(self, dead: set[str], events: list[str]) -> bool:
        """The Deployment runs ``REPLICAS`` new pods in place of the ``dead`` ones (noted once)."""
        pods = self._operator_pods()
        new = sorted(p["metadata"]["name"] for p in pods if p["metadata"]["name"] not in dead)
        if any(p["metadata"]["name"] in dead for p in pods) or len(new) < REPLICAS:
            return False
        if not all(p["status"].get("phase") == "Running" for p in pods):
            return False
        note = f"operator recreated as {new}"
        if note not in events:
            events.append(note)
        return True

    def delete_tiered_topic(self, topic: str, moment: str) -> str:
        """Delete ``topic``'s TieredTopic (``deletionPolicy: Delete``): at once (``idle``) or once a copy
        Job whose work holds the topic runs (``copy_job``), so its delete meets a copy of it in flight.
        The topic stays in Kafka (deleting a TieredTopic leaves the local data, docs/operations.md)."""
        plane = self._plane()
        obj = plane.request("GET", f"{API}/tieredtopics/{topic}")
        finalizers = obj["metadata"].get("finalizers") or []
        topic_id = (obj.get("status") or {}).get("topicId")
        where = "at once"
        if moment == "copy_job":
            deadline = time.monotonic() + STOP_DEADLINE
            where = f"no copy Job of it seen running within {STOP_DEADLINE:.0f}s"
            while time.monotonic() < deadline:
                running = [
                    j["metadata"]["name"]
                    for j in self._plane().request("GET", JOBS)["items"]
                    if (j["metadata"].get("labels") or {}).get(KIND_LABEL) == "copy"
                    and (j.get("status") or {}).get("active")
                    and topic in _work_topics(j)
                ]
                if running:
                    where = f"while copy Job {running[0]} ran"
                    break
                time.sleep(0.3)
        self.topics = [t for t in self.topics if t != topic]
        plane.request("DELETE", f"{API}/tieredtopics/{topic}")
        self.tiered_deleted[topic] = topic_id
        return f"TieredTopic {topic} (topic id {topic_id}, finalizers {finalizers}) deleted {where}"

    def wait_tiered_topics_gone(self) -> dict[str, str]:
        """Every deleted TieredTopic gone (its delete Job succeeded and the finalizer released) within the
        deadline; those still there, with their finalizers and delete Jobs."""
        left: dict[str, str] = {}
        deadline = time.monotonic() + ROUND_DEADLINE
        for topic in self.tiered_deleted:
            while True:
                try:
                    obj = self._plane().request("GET", f"{API}/tieredtopics/{topic}")
                except ApiError as exc:
                    if exc.code == 404:
                        break
                    raise
                if time.monotonic() > deadline:
                    jobs = [
                        (j["metadata"]["name"], j.get("status"))
                        for j in self._plane().request("GET", JOBS)["items"]
                        if (j["metadata"].get("labels") or {}).get(KIND_LABEL) == "delete"
                    ]
                    finalizers = obj["metadata"].get("finalizers")
                    left[topic] = f"TieredTopic still there: finalizers {finalizers}, delete Jobs {jobs}"[
                        :2000
                    ]
                    break
                time.sleep(2)
        return left

    def _ran_since(self, status: dict[str, Any], began: float) -> bool:
        for kind in ("lastCopy", "lastCleanup"):
            outcome = status.get(kind) or {}
            job = outcome.get("job")
            if not job:
                return False
            try:
                created = self._plane().request("GET", f"{JOBS}/{job}")["metadata"]["creationTimestamp"]
            except ApiError:
                return False  # gone (ttl): an old one
            if _rfc3339(created) < began - 1:  # creationTimestamp has whole seconds
                return False
        return True

    def _delete_a_pod_at(self, fault: str) -> str | None:
        """Stop the next Job that reaches ``fault`` there, delete its pod (Kubernetes kills it mid-run),
        and let the Jobs after it run unhindered. Returns the fault, or None if no Job reached it."""
        plane = self._plane()
        self._set_job_env({"TIERKEEPER_FAULT": f"{fault}:stop"})
        deadline = time.monotonic() + STOP_DEADLINE
        deleted = None
        try:
            while time.monotonic() < deadline and deleted is None:
                for pod in plane.request("GET", PODS)["items"]:
                    if self._pod_stopped(pod):
                        plane.request("DELETE", f"{PODS}/{pod['metadata']['name']}")
                        self.pods_deleted += 1
                        deleted = fault
                        break
                else:
                    time.sleep(1)
        finally:
            self._set_job_env({})
        return deleted

    def _delete_stopped_pods(self) -> None:
        """A Job created while the Secret still named the fault may stop there later: its pod is deleted
        the same way (the operator runs one copy per broker, so it would hold its broker's copies)."""
        plane = self._plane()
        for pod in plane.request("GET", PODS)["items"]:
            if self._pod_stopped(pod):
                plane.request("DELETE", f"{PODS}/{pod['metadata']['name']}")
                self.pods_deleted += 1

    def _active_jobs(self, *, created_before: float = float("inf")) -> list[str]:
        return [
            j["metadata"]["name"]
            for j in self._plane().request("GET", JOBS)["items"]
            if (j.get("status") or {}).get("active")
            and _rfc3339(j["metadata"]["creationTimestamp"]) < created_before - 1
        ]

    def _pod_stopped(self, pod: dict[str, Any]) -> bool:
        if pod["status"].get("phase") != "Running":
            return False
        plane = self._plane()
        for container in pod["spec"]["containers"]:
            try:
                pid = plane.kubelet.pid_of(NAMESPACE, pod["metadata"]["name"], container["name"])
            except Exception:  # noqa: BLE001 - not started by this kubelet yet
                continue
            if _stopped(pid):
                return True
        return False

    # ---- quiet between rounds --------------------------------------------------------------------
    def quiesce(self, timeout: float = ROUND_DEADLINE) -> None:
        """The operator scaled to 0 and no Job of it still running: the checks' own cleanup, orphan sweep
        and retention pass then see a tier nothing else writes."""
        self._operator_replicas(0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._delete_stopped_pods()
            if not self._active_jobs():
                return
            time.sleep(2)
        raise AssertionError(f"the operator's Jobs still ran {timeout}s after it was scaled to 0")

    def _operator_replicas(self, replicas: int) -> None:
        plane = self._plane()
        selector = f"app.kubernetes.io/instance%3D{RELEASE}"
        path = f"/apis/apps/v1/namespaces/{SYSTEM_NAMESPACE}/deployments"
        for deployment in plane.request("GET", f"{path}?labelSelector={selector}")["items"]:
            if deployment["spec"].get("replicas") != replicas:
                plane.rest().call(
                    "PATCH",
                    f"{path}/{deployment['metadata']['name']}",
                    {"spec": {"replicas": replicas}},
                    content_type="application/merge-patch+json",
                )

    def stop(self) -> None:
        if self.plane is not None:
            try:
                self._helm("uninstall", RELEASE, "-n", SYSTEM_NAMESPACE)
            except Exception:  # noqa: BLE001 - the plane stops next anyway
                pass
        super().stop()


def _work_topics(job: dict[str, Any]) -> set[str]:
    """The topics a Job was created for (its work annotation: [[TieredTopic key, topic, partitions]])."""
    try:
        work = json.loads((job["metadata"].get("annotations") or {}).get(WORK_ANNOTATION, "[]"))
        return {str(entry[1]) for entry in work}
    except (ValueError, TypeError, IndexError):
        return set()


def _ready(status: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))


def _resource(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "tierkeeper.io/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}
