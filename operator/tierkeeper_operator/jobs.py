"""The parts every Job the operator creates is made of: pure functions and the labels that find them.

- Names are deterministic: the owner and the round they belong to, so re-creating the Job of a round
  after an operator restart hits "already exists" instead of starting a second one.
- Labels say what a Job is (kind, cluster, broker or TieredTopic), so the operator finds its running Jobs
  and never starts a second copy for a broker or a second cleanup for a topic; an annotation lists the
  work, so the result goes to the right TieredTopics.
- Every Job runs with the restricted Pod Security profile, the resources of the cluster configuration,
  ``backoffLimit`` and ``ttlSecondsAfterFinished``, and leaves its result as the container's termination
  message (``--result-file /dev/termination-log``, :mod:`storage_core.reconcile.results`).

Each kind's own Job (copy, cleanup, export, ...) and what its result means are the rows of
:mod:`tierkeeper_operator.job_kinds`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storage_core.api import API_VERSION
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.resources import TieredBrokerSpec
from storage_core.reconcile.requests import Request

MANAGED_BY = "tierkeeper-operator"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_KIND = "tierkeeper.io/job-kind"
LABEL_CLUSTER = "tierkeeper.io/cluster"
LABEL_BROKER = "tierkeeper.io/broker-id"
LABEL_TOPIC = "tierkeeper.io/tieredtopic"
ANNOTATION_WORK = "tierkeeper.io/work"
ANNOTATION_RECORDED = "tierkeeper.io/recorded"
ANNOTATION_CREATED_BY = "tierkeeper.io/created-by"  # the operator replica (peer id) that created it
RESULT_PATH = "/dev/termination-log"
CONTAINER = "tierkeeper"
RUN_AS = 10001  # the image's USER (Dockerfile)


@dataclass(frozen=True)
class Owner:
    """The custom resource a Job belongs to (garbage-collected with it)."""

    kind: str
    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, kind: str, obj: Mapping[str, Any]) -> Owner:
        """The owner ``obj`` (a listed object of ``kind``) is."""
        meta = obj["metadata"]
        return cls(kind, meta["name"], meta["namespace"], meta["uid"])

    def reference(self) -> dict[str, Any]:
        """The ownerReference of an object the operator makes for this resource: the controller owner,
        without blockOwnerDeletion (which would need the finalizers permission on the owner's kind)."""
        return {
            "apiVersion": API_VERSION,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }


def restricted_container_security() -> dict[str, Any]:
    """A container's securityContext under the restricted Pod Security profile, with a read-only root
    (only the /tmp emptyDir is writable), for every container the operator makes."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def restricted_pod_security() -> dict[str, Any]:
    """A pod's securityContext under the restricted profile: the image's non-root user, the runtime's
    default seccomp profile (every pod the operator makes)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def job_name(kind: str, owner: str, round_key: str) -> str:
    """``tk-<kind>-<owner>-<hash>``: 47 characters besides ``kind``, so with the kinds' parts (at most 10,
    :data:`.job_kinds.KINDS`) a name stays within the 63 of the pods' ``job-name`` label."""
    digest = hashlib.sha256(f"{kind}/{owner}/{round_key}".encode()).hexdigest()[:10]
    return f"tk-{kind}-{owner[:32].rstrip('-.')}-{digest}"


def _quantities(values: Mapping[str, str | None]) -> dict[str, str]:
    return {key: value for key, value in values.items() if value}


def job_container(cluster: KafkaClusterConfig, args: list[str]) -> dict[str, Any]:
    """The one container of a Job running ``args`` with the cluster's image, resources and storage Secret."""
    jobs = cluster.jobs
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": jobs.image,
        "imagePullPolicy": jobs.image_pull_policy,
        "args": args,
        "terminationMessagePath": RESULT_PATH,
        "terminationMessagePolicy": "File",
        "resources": {
            "requests": _quantities(jobs.resources.requests.model_dump(by_alias=True)),
            "limits": _quantities(jobs.resources.limits.model_dump(by_alias=True)),
        },
        "securityContext": restricted_container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    secret = cluster.remote.storage_options_secret_ref
    if secret is not None:
        # Credentials reach the storage provider as environment variables (e.g. AWS_ACCESS_KEY_ID), never
        # as command-line arguments that `kubectl get job -o yaml` would show.
        container["envFrom"] = [{"secretRef": {"name": secret.name}}]
    return container


KAFKA_CONFIG_DIR = "/etc/tierkeeper/kafka-client"


def mount_kafka_client(
    cluster: KafkaClusterConfig, container: dict[str, Any], volumes: list[dict[str, Any]]
) -> None:
    """Mount the Secret of the cluster's ``clientConfigSecretRef`` read-only (one file per property) where
    the request's ``--kafka-config-dir`` points; its values never appear in the Job."""
    secret = cluster.client_config_secret_ref
    if secret is not None:
        container["volumeMounts"].append(
            {"name": "kafka-client", "mountPath": KAFKA_CONFIG_DIR, "readOnly": True}
        )
        volumes.append({"name": "kafka-client", "secret": {"secretName": secret.name}})


def job_args(request: Request) -> list[str]:
    """The request's command line, plus where the Job leaves its result (the termination message)."""
    return [*request.args(), "--result-file", RESULT_PATH, "--json"]


def _tmp(size_limit: str | None) -> dict[str, str]:
    return {"sizeLimit": size_limit} if size_limit else {}


def job_manifest(
    name: str,
    owner: Owner,
    labels: dict[str, str],
    annotations: dict[str, str],
    cluster: KafkaClusterConfig,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    node_name: str | None,
) -> dict[str, Any]:
    """The Job around ``container``, owned by ``owner``, with the cluster's ``jobs`` settings (pinned to
    ``node_name`` when given)."""
    jobs = cluster.jobs
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": restricted_pod_security(),
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": _tmp(jobs.tmp_size_limit)}, *volumes],
        # Jobs read Kafka, the log dir and the bucket, never the Kubernetes API; except Spark with a k8s://
        # master, which starts its executors through it.
        "automountServiceAccountToken": (jobs.spark_master or "").startswith("k8s://"),
    }
    if jobs.service_account_name:
        pod_spec["serviceAccountName"] = jobs.service_account_name
    if node_name:
        # Pinned to the broker's node (its volume): the user's node labels could only make it unschedulable.
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    elif jobs.node_selector:
        pod_spec["nodeSelector"] = dict(jobs.node_selector)
    if jobs.tolerations:
        pod_spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in jobs.tolerations]
    if jobs.priority_class_name:
        pod_spec["priorityClassName"] = jobs.priority_class_name
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": owner.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "backoffLimit": jobs.backoff_limit,
            "ttlSecondsAfterFinished": jobs.ttl_seconds_after_finished,
            "activeDeadlineSeconds": jobs.active_deadline_seconds,
            "template": {
                "metadata": {
                    "labels": {**jobs.pod_labels, **labels},
                    "annotations": dict(jobs.pod_annotations),
                },
                "spec": pod_spec,
            },
        },
    }


def log_dir_volumes(
    broker: TieredBrokerSpec, *, read_only: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) of every log dir of ``broker``: a volume per claim (``log-dir``, then
    ``log-dir-1``...), a mount per log dir (JBOD: several claims, or several sub-paths of one)."""
    names: dict[str, str] = {}
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for location in broker.log_dirs():
        claim = location.claim_name
        if claim is None:
            raise ValueError(f"broker {broker.broker_id}: log dir {location.path} has no claimName")
        if claim not in names:
            names[claim] = "log-dir" if not names else f"log-dir-{len(names)}"
            source: dict[str, Any] = {"claimName": claim}
            if read_only:
                source["readOnly"] = True
            volumes.append({"name": names[claim], "persistentVolumeClaim": source})
        mount: dict[str, Any] = {"name": names[claim], "mountPath": location.mount_path}
        if read_only:
            mount["readOnly"] = True
        if location.sub_path:
            mount["subPath"] = location.sub_path
        mounts.append(mount)
    return volumes, mounts


def work_annotation(work: Sequence[tuple[str, str, Sequence[int]]]) -> dict[str, str]:
    """The annotation listing a Job's (TieredTopic key, topic, partitions), read back by :func:`work_of`."""
    listed = [[key, topic, list(partitions)] for key, topic, partitions in work]
    return {ANNOTATION_WORK: json.dumps(listed, separators=(",", ":"))}


def work_of(job: Mapping[str, Any]) -> list[tuple[str, str, list[int]]]:
    """The (TieredTopic key, topic, partitions) a Job was created for, from its annotation."""
    raw = (job.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_WORK, "[]")
    try:
        return [(str(k), str(t), [int(p) for p in ps]) for k, t, ps in json.loads(raw)]
    except (ValueError, TypeError):
        return []


def job_state(job: Mapping[str, Any]) -> str:
    """``Running``, ``Succeeded`` or ``Failed`` from a Job's conditions."""
    for condition in job.get("status", {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "Succeeded"
        if condition.get("status") == "True" and condition.get("type") in ("Failed", "FailureTarget"):
            return "Failed"
    return "Running"


def termination_message(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The result the Job's last finished pod left (None when no pod left one)."""
    finished = []
    for pod in pods:
        for status in pod.get("status", {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated")
            if status.get("name") == CONTAINER and terminated and terminated.get("message"):
                finished.append((str(terminated.get("finishedAt") or ""), str(terminated["message"])))
    return max(finished)[1] if finished else None
