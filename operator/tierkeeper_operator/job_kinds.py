"""The closed set of Job kinds the operator creates, and one table of what each kind is.

A row (:class:`KindRules`, in :data:`KINDS`) says how a kind's Job is made (``make``, from a planned
action), which part of the round follows its Jobs, what a running one holds (at most one copy per broker,
one cleanup and one table run per TieredTopic), whether it writes the remote tier (a delete waits for
those), how its finished Job's result is folded into statuses (``fold``, :mod:`.job_folds`), and which
status field says how its last run went (``last_run``, read for the Event of a finished Job). The round's
executor (:mod:`.job_starter`) and the folding of finished Jobs (:mod:`.job_results`) read the rows and
never compare kind names, so a new kind is a new row (and its request in
:mod:`storage_core.reconcile.requests`).

The builders are pure: an action (or a broker, a topic incarnation, a cluster) in, a Job manifest out.
Copy Jobs run on the broker's node with its log-dir claims mounted read-only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.resources import TieredBrokerSpec
from storage_core.api.status import RunOutcome, TableStatus, TieredTopicStatus
from storage_core.reconcile.planner import CleanupAction, CopyAction
from storage_core.reconcile.requests import (
    check_remote_request,
    cleanup_request,
    copy_request,
    delete_request,
    rebuild_request,
    table_request,
)
from storage_core.reconcile.tables import TableAction
from tierkeeper_operator.job_folds import Fold, fold_cleanup_result, fold_copy_result, fold_table_result
from tierkeeper_operator.jobs import (
    KAFKA_CONFIG_DIR,
    LABEL_BROKER,
    LABEL_CLUSTER,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_TOPIC,
    MANAGED_BY,
    Owner,
    job_args,
    job_container,
    job_manifest,
    job_name,
    job_state,
    log_dir_volumes,
    mount_kafka_client,
    work_annotation,
    work_of,
)


class JobKind(StrEnum):
    """A Job the operator makes; the value is its ``tierkeeper.io/job-kind`` label."""

    COPY = "copy"
    CLEANUP = "cleanup"
    EXPORT = "export"
    TABLE_MAINTENANCE = "table-maintenance"
    DELETE = "delete"
    REBUILD = "rebuild"
    BUCKET_CHECK = "bucket-check"

    @property
    def event(self) -> str:
        """Stem of its Events' reasons: ``<event>Started``, ``<event>Succeeded``, ``<event>Failed``."""
        return self.value.title().replace("-", "")


TABLE_RUNS: Mapping[str, JobKind] = {"export": JobKind.EXPORT, "maintain": JobKind.TABLE_MAINTENANCE}
"""The Job kind of a table run, by ``TableAction.kind``."""


@dataclass(frozen=True)
class JobInputs:
    """What making a planned action's Job needs besides the action: the cluster, the resource it belongs
    to, the round (deterministic names) and, for a copy, the TieredBroker it reads and its node if known."""

    cluster: KafkaClusterConfig
    owner: Owner
    round_key: str
    broker: TieredBrokerSpec | None = None
    node: str | None = None


Follower = Literal["topics", "deletion", "rebuilds", "clusters"]


def _started(name: str, _action: Any) -> str:
    return f"Job {name} started"


@dataclass(frozen=True)
class KindRules:
    """What one Job kind is (one row of :data:`KINDS`)."""

    name_part: str
    """In its Jobs' names (``tk-<name_part>-<owner>-<hash>``): at most 10 characters, so a name fits the
    63 of a label value; never changed (a Job of the same round must keep its name across an upgrade)."""
    followed_by: Follower = "topics"
    """The part of a round that makes and follows its Jobs: the topic rounds (plan, executor, fold), the
    deletion of a TieredTopic, the rebuild rounds or the TieredCluster rounds."""
    owner_kind: Literal["TieredTopic", "TieredBroker", "TieredCluster"] = "TieredTopic"
    """The resource its Jobs belong to and its Events are about."""
    holds: Literal["broker", "cleanup", "table"] | None = None
    """What a running Job of it holds: the (cluster, broker) of a copy, or the TieredTopics of a cleanup
    or of a table run (:class:`storage_core.reconcile.observed.RunningWork`)."""
    writes_tier: bool = False
    """Its running Jobs write the remote tier (a TieredTopic's delete waits for them)."""
    make: Callable[[Any, JobInputs], dict[str, Any]] | None = None
    """Planned action -> its Job (the topic rounds' kinds; the others are made by their follower)."""
    started: Callable[[str, Any], str] = _started
    """The message of the ``<event>Started`` Event: the Job's name and the action it runs."""
    fold: Fold | None = None
    last_run: Callable[[TieredTopicStatus], RunOutcome | None] | None = None
    """The TieredTopic status field a folded result lands in (read for the finished Job's Event)."""


def _labels(kind: JobKind, cluster: str, **more: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_KIND: kind.value, LABEL_CLUSTER: cluster, **more}


def _name(kind: JobKind, owner: str, round_key: str) -> str:
    return job_name(KINDS[kind].name_part, owner, round_key)


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
    container = job_container(cluster, args)
    volumes: list[dict[str, Any]] = []
    mount_kafka_client(cluster, container, volumes)
    claims, mounts = log_dir_volumes(broker, read_only=True)
    container["volumeMounts"].extend(mounts)
    volumes[:0] = claims
    labels = _labels(JobKind.COPY, action.cluster, **{LABEL_BROKER: str(action.broker_id)})
    annotations = work_annotation([(w.topic_key, w.topic, w.partitions) for w in action.work])
    name = _name(JobKind.COPY, owner.name, round_key)
    return job_manifest(name, owner, labels, annotations, cluster, container, volumes, node_name)


def cleanup_job(
    action: CleanupAction, cluster: KafkaClusterConfig, owner: Owner, round_key: str
) -> dict[str, Any]:
    """The Job running remote retention, the orphan sweep and the local trim for one topic."""
    args = job_args(cleanup_request(action, cluster, config_dir=KAFKA_CONFIG_DIR))
    container = job_container(cluster, args)
    volumes: list[dict[str, Any]] = []
    mount_kafka_client(cluster, container, volumes)
    labels = _labels(JobKind.CLEANUP, action.cluster, **{LABEL_TOPIC: owner.name})
    annotations = work_annotation([(action.topic_key, action.topic, [])])
    name = _name(JobKind.CLEANUP, owner.name, round_key)
    return job_manifest(name, owner, labels, annotations, cluster, container, volumes, None)


def table_job(
    action: TableAction, cluster: KafkaClusterConfig, owner: Owner, round_key: str
) -> dict[str, Any]:
    """The Job exporting the topic's tier to its Iceberg table (Spark in the Job's pod, or the cluster's
    sparkMaster) or maintaining that table. A configured catalog's Secret becomes environment variables
    (pyiceberg reads PYICEBERG_CATALOG__<NAME>__<KEY>), and so does the schema registry's, never
    arguments."""
    args = job_args(table_request(action, cluster))
    container = job_container(cluster, args)
    catalog = action.table.catalog
    if catalog is not None and catalog.secret_ref is not None:
        container.setdefault("envFrom", []).append({"secretRef": {"name": catalog.secret_ref.name}})
    decoding = action.table.value_decoding
    if action.kind == "export" and decoding is not None and decoding.secret_ref is not None:
        # The schema registry's credentials (SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO), never in arguments.
        container.setdefault("envFrom", []).append({"secretRef": {"name": decoding.secret_ref.name}})
    kind = TABLE_RUNS[action.kind]
    labels = _labels(kind, action.cluster, **{LABEL_TOPIC: owner.name})
    annotations = work_annotation([(action.topic_key, action.topic, [])])
    name = _name(kind, owner.name, round_key)
    return job_manifest(name, owner, labels, annotations, cluster, container, [], None)


def delete_job(
    topic: str, topic_id: str, cluster_name: str, cluster: KafkaClusterConfig, owner: Owner, round_key: str
) -> dict[str, Any]:
    """The Job deleting one topic incarnation's remote tier (deletionPolicy Delete), crash-safe and
    idempotent: a retry after a partial run finishes it, and a tier already gone is not an error."""
    args = job_args(delete_request(topic, topic_id, cluster))
    labels = _labels(JobKind.DELETE, cluster_name, **{LABEL_TOPIC: owner.name})
    name = _name(JobKind.DELETE, owner.name, round_key)
    return job_manifest(name, owner, labels, {}, cluster, job_container(cluster, args), [], None)


def rebuild_job(
    spec: TieredBrokerSpec, cluster: KafkaClusterConfig, owner: Owner, node: str | None, round_key: str
) -> dict[str, Any]:
    """The Job restoring the broker's log dirs on their claims, mounted read-write (the broker is held)."""
    assert spec.log_dir.claim_name is not None
    args = job_args(rebuild_request(spec, cluster, config_dir=KAFKA_CONFIG_DIR))
    container = job_container(cluster, args)
    volumes, mounts = log_dir_volumes(spec, read_only=False)
    mount_kafka_client(cluster, container, volumes)
    container["volumeMounts"].extend(mounts)
    labels = _labels(JobKind.REBUILD, spec.cluster_ref.name, **{LABEL_BROKER: str(spec.broker_id)})
    name = _name(JobKind.REBUILD, owner.name, round_key)
    job = job_manifest(name, owner, labels, {}, cluster, container, volumes, node)
    pod = job["spec"]["template"]["spec"]
    # It writes the broker's files, so it runs as the broker does when the spec says how.
    if spec.rebuild.run_as_user is not None:
        pod["securityContext"]["runAsUser"] = spec.rebuild.run_as_user
        pod["securityContext"]["runAsNonRoot"] = spec.rebuild.run_as_user != 0
        container["securityContext"]["runAsNonRoot"] = spec.rebuild.run_as_user != 0
    if spec.rebuild.run_as_group is not None:
        pod["securityContext"]["runAsGroup"] = spec.rebuild.run_as_group
    job["spec"]["backoffLimit"] = 0  # a failed rebuild is reported, not retried behind the user's back
    return job


def bucket_check_job(cluster: KafkaClusterConfig, owner: Owner, attempt_key: str) -> dict[str, Any]:
    """The short Job checking the cluster's remote tier with the storage Secret the copy Jobs get (envFrom):
    the operator learns the verdict from its termination message and never reads the Secret itself."""
    args = job_args(check_remote_request(cluster))
    labels = _labels(JobKind.BUCKET_CHECK, cluster.name)
    name = _name(JobKind.BUCKET_CHECK, owner.name, attempt_key)
    job = job_manifest(name, owner, labels, {}, cluster, job_container(cluster, args), [], None)
    job["spec"]["backoffLimit"] = 0  # the next check is the retry
    job["spec"]["activeDeadlineSeconds"] = 300
    return job


def _make_copy(action: CopyAction, at: JobInputs) -> dict[str, Any]:
    if at.broker is None:
        raise ValueError(f"copy Job of {at.owner.namespace}/{at.owner.name}: no TieredBroker spec")
    return copy_job(action, at.cluster, at.broker, at.owner, at.node, at.round_key)


def _make_cleanup(action: CleanupAction, at: JobInputs) -> dict[str, Any]:
    return cleanup_job(action, at.cluster, at.owner, at.round_key)


def _make_table(action: TableAction, at: JobInputs) -> dict[str, Any]:
    return table_job(action, at.cluster, at.owner, at.round_key)


def _table_kind(
    name_part: str, action_kind: str, last_run: Callable[[TableStatus], RunOutcome | None]
) -> KindRules:
    """An export or a table maintenance run: one Job per TieredTopic at a time, its run in status.table."""
    return KindRules(
        name_part=name_part,
        holds="table",
        make=_make_table,
        fold=fold_table_result(action_kind),
        last_run=lambda status: last_run(status.table) if status.table is not None else None,
    )


def _copies(name: str, action: CopyAction) -> str:
    return f"Job {name} copies {sum(len(w.partitions) for w in action.work)} partitions"


KINDS: Mapping[JobKind, KindRules] = {
    JobKind.COPY: KindRules(
        name_part="copy",
        owner_kind="TieredBroker",
        holds="broker",
        writes_tier=True,
        make=_make_copy,
        started=_copies,
        fold=fold_copy_result,
        last_run=lambda status: status.last_copy,
    ),
    JobKind.CLEANUP: KindRules(
        name_part="cleanup",
        holds="cleanup",
        writes_tier=True,
        make=_make_cleanup,
        fold=fold_cleanup_result,
        last_run=lambda status: status.last_cleanup,
    ),
    JobKind.EXPORT: _table_kind("export", "export", lambda t: t.last_export),
    JobKind.TABLE_MAINTENANCE: _table_kind("tablemaint", "maintain", lambda t: t.last_maintenance),
    # Made (delete_job, rebuild_job, bucket_check_job) and followed by the deletion of a TieredTopic, the
    # rebuild rounds and the TieredCluster rounds: no plan, executor or fold of the topic rounds.
    JobKind.DELETE: KindRules(name_part="delete", followed_by="deletion"),
    JobKind.REBUILD: KindRules(name_part="rebuild", followed_by="rebuilds", owner_kind="TieredBroker"),
    JobKind.BUCKET_CHECK: KindRules(name_part="check", followed_by="clusters", owner_kind="TieredCluster"),
}


def kind_of(job: Mapping[str, Any]) -> JobKind | None:
    """The kind of one of the operator's Jobs (None: a label this operator does not know)."""
    label = (job["metadata"].get("labels") or {}).get(LABEL_KIND)
    try:
        return JobKind(str(label))
    except ValueError:
        return None


def tier_writers(jobs: Sequence[Mapping[str, Any]], topic_key: str) -> list[str]:
    """The Jobs still running with work for the TieredTopic ``topic_key`` of a kind that writes its remote
    tier: its delete waits for them."""
    writers = []
    for job in jobs:
        kind = kind_of(job)
        if kind is None or not KINDS[kind].writes_tier or job_state(job) != "Running":
            continue
        if any(key == topic_key for key, _, _ in work_of(job)):
            writers.append(str(job["metadata"]["name"]))
    return sorted(writers)
