"""The copy, cleanup, export and table maintenance Jobs the operator creates: pure functions from a
planned action to a Job manifest.

- Names are deterministic: the owner and the round they belong to, so re-creating the Job of a round
  after an operator restart hits "already exists" instead of starting a second one.
- Labels say what a Job is (kind, cluster, broker or TieredTopic), so the operator finds its running Jobs
  and never starts a second copy for a broker or a second cleanup for a topic; an annotation lists the
  work, so the result goes to the right TieredTopics.
- Copy Jobs run on the broker's node with its log-dir claim mounted read-only; every Job runs with the
  restricted Pod Security profile, the resources of the cluster configuration, ``backoffLimit`` and
  ``ttlSecondsAfterFinished``, and leaves its result as the container's termination message
  (``--result-file /dev/termination-log``, :mod:`storage_core.reconcile.results`).
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
from storage_core.reconcile.planner import CleanupAction, CopyAction
from storage_core.reconcile.requests import (
    Request,
    check_remote_request,
    cleanup_request,
    copy_request,
    delete_request,
    table_request,
)
from storage_core.reconcile.tables import TableAction

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
    """``tk-<kind>-<owner>-<hash>``: at most 52 characters, so the pods' ``job-name`` labels stay valid."""
    digest = hashlib.sha256(f"{kind}/{owner}/{round_key}".encode()).hexdigest()[:10]
    return f"tk-{kind}-{owner[:32].rstrip('-.')}-{digest}"


def _quantities(values: Mapping[str, str | None]) -> dict[str, str]:
    return {key: value for key, value in values.items() if value}


def _container(cluster: KafkaClusterConfig, args: list[str]) -> dict[str, Any]:
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


def _with_kafka_client(
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


def _job(
    name: str,
    owner: Owner,
    labels: dict[str, str],
    annotations: dict[str, str],
    cluster: KafkaClusterConfig,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    node_name: str | None,
) -> dict[str, Any]:
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


def copy_job(
    action: CopyAction,
    cluster: KafkaClusterConfig,
    broker: TieredBrokerSpec,
    owner: Owner,
    node_name: str | None,
    round_key: str,
) -> dict[str, Any]:
    """The Job copying ``action``'s partitions from the broker's log dirs (claims mounted read-only)."""
    if broker.log_dir.claim_name is None:
        raise ValueError(f"TieredBroker {owner.namespace}/{owner.name} has no logDir.claimName")
    args = job_args(copy_request(action, cluster, broker, config_dir=KAFKA_CONFIG_DIR))
    container = _container(cluster, args)
    volumes: list[dict[str, Any]] = []
    _with_kafka_client(cluster, container, volumes)
    claims, mounts = log_dir_volumes(broker, read_only=True)
    container["volumeMounts"].extend(mounts)
    volumes[:0] = claims
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_KIND: "copy",
        LABEL_CLUSTER: action.cluster,
        LABEL_BROKER: str(action.broker_id),
    }
    listed = [[w.topic_key, w.topic, list(w.partitions)] for w in action.work]
    annotations = {ANNOTATION_WORK: json.dumps(listed, separators=(",", ":"))}
    name = job_name("copy", owner.name, round_key)
    return _job(name, owner, labels, annotations, cluster, container, volumes, node_name)


def cleanup_job(
    action: CleanupAction, cluster: KafkaClusterConfig, owner: Owner, round_key: str
) -> dict[str, Any]:
    """The Job running remote retention, the orphan sweep and the local trim for one topic."""
    args = job_args(cleanup_request(action, cluster, config_dir=KAFKA_CONFIG_DIR))
    container = _container(cluster, args)
    volumes: list[dict[str, Any]] = []
    _with_kafka_client(cluster, container, volumes)
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_KIND: "cleanup",
        LABEL_CLUSTER: action.cluster,
        LABEL_TOPIC: owner.name,
    }
    annotations = {ANNOTATION_WORK: json.dumps([[action.topic_key, action.topic, []]], separators=(",", ":"))}
    name = job_name("cleanup", owner.name, round_key)
    return _job(name, owner, labels, annotations, cluster, container, volumes, None)


TABLE_JOB_KINDS = {"export": "export", "maintain": "table-maintenance"}
"""Job-kind label of a table run, by TableAction.kind."""


def table_job(
    action: TableAction, cluster: KafkaClusterConfig, owner: Owner, round_key: str
) -> dict[str, Any]:
    """The Job exporting the topic's tier to its Iceberg table (Spark in the Job's pod, or the cluster's
    sparkMaster) or maintaining that table. A configured catalog's Secret becomes environment variables
    (pyiceberg reads PYICEBERG_CATALOG__<NAME>__<KEY>), and so does the schema registry's, never
    arguments."""
    args = job_args(table_request(action, cluster))
    container = _container(cluster, args)
    catalog = action.table.catalog
    if catalog is not None and catalog.secret_ref is not None:
        container.setdefault("envFrom", []).append({"secretRef": {"name": catalog.secret_ref.name}})
    decoding = action.table.value_decoding
    if action.kind == "export" and decoding is not None and decoding.secret_ref is not None:
        # The schema registry's credentials (SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO), never in arguments.
        container.setdefault("envFrom", []).append({"secretRef": {"name": decoding.secret_ref.name}})
    kind = TABLE_JOB_KINDS[action.kind]
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_KIND: kind,
        LABEL_CLUSTER: action.cluster,
        LABEL_TOPIC: owner.name,
    }
    annotations = {ANNOTATION_WORK: json.dumps([[action.topic_key, action.topic, []]], separators=(",", ":"))}
    name = job_name("export" if action.kind == "export" else "tablemaint", owner.name, round_key)
    return _job(name, owner, labels, annotations, cluster, container, [], None)


def delete_job(
    topic: str, topic_id: str, cluster_name: str, cluster: KafkaClusterConfig, owner: Owner, round_key: str
) -> dict[str, Any]:
    """The Job deleting one topic incarnation's remote tier (deletionPolicy Delete), crash-safe and
    idempotent: a retry after a partial run finishes it, and a tier already gone is not an error."""
    args = job_args(delete_request(topic, topic_id, cluster))
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_KIND: "delete",
        LABEL_CLUSTER: cluster_name,
        LABEL_TOPIC: owner.name,
    }
    name = job_name("delete", owner.name, round_key)
    return _job(name, owner, labels, {}, cluster, _container(cluster, args), [], None)


BUCKET_CHECK = "bucket-check"
"""The job-kind label of a TieredCluster's bucket check (followed by the cluster rounds, not the topics')."""


def bucket_check_job(cluster: KafkaClusterConfig, owner: Owner, attempt_key: str) -> dict[str, Any]:
    """The short Job checking the cluster's remote tier with the storage Secret the copy Jobs get (envFrom):
    the operator learns the verdict from its termination message and never reads the Secret itself."""
    args = job_args(check_remote_request(cluster))
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_KIND: BUCKET_CHECK, LABEL_CLUSTER: cluster.name}
    name = job_name("check", owner.name, attempt_key)
    job = _job(name, owner, labels, {}, cluster, _container(cluster, args), [], None)
    job["spec"]["backoffLimit"] = 0  # the next check is the retry
    job["spec"]["activeDeadlineSeconds"] = 300
    return job


def work_of(job: Mapping[str, Any]) -> list[tuple[str, str, list[int]]]:
    """The (TieredTopic key, topic, partitions) a Job was created for, from its annotation."""
    raw = (job.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_WORK, "[]")
    try:
        return [(str(k), str(t), [int(p) for p in ps]) for k, t, ps in json.loads(raw)]
    except (ValueError, TypeError):
        return []


def tier_writers(jobs: Sequence[Mapping[str, Any]], topic_key: str) -> list[str]:
    """The copy and cleanup Jobs still running with work for the TieredTopic ``topic_key``: they write its
    remote tier, so its delete waits for them."""
    return sorted(
        str(j["metadata"]["name"])
        for j in jobs
        if (j["metadata"].get("labels") or {}).get(LABEL_KIND) in ("copy", "cleanup")
        and job_state(j) == "Running"
        and any(key == topic_key for key, _, _ in work_of(j))
    )


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
