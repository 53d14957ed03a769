"""TieredClusters, decided: which clusters are in effect, which TieredTopics and TieredBrokers may name them,
when a cluster's bucket is checked again, whether a deleted one may go, and each one's status.

Pure: the operator's cluster rounds (``tierkeeper_operator.cluster_rounds``) feed it what they listed and
observed and carry out what it says.

The rules:
- One name, one cluster. The rest of the code resolves ``clusterRef.name`` against one map by name
  (Job labels, copy locks and the rebuild settings carry the name), so TieredClusters of one name in
  several namespaces are accepted only while they resolve to the same settings (the chart renders one per
  watched namespace from values ``clusters:``), and a file entry (``--cluster FILE``) wins over a
  TieredCluster of its name whose settings differ: that TieredCluster is Stalled with one line saying so.
- A TieredCluster serves its own namespace: a TieredTopic or TieredBroker whose ``clusterRef`` names a
  TieredCluster of another namespace (and no file entry of that name exists) is refused with one line.
  File entries serve every namespace, as before.
- Deleting a TieredCluster never deletes a tier: its finalizer holds it (and its settings stay in effect,
  so the TieredTopics' own deletion policies still run) until no TieredTopic or TieredBroker names it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import Parsed
from storage_core.api.resources import ClusterMemberSpec
from storage_core.api.tiered_cluster import (
    BucketCheck,
    GatewayState,
    KafkaCheck,
    StrimziSummary,
    TieredClusterSpec,
    TieredClusterStatus,
    resolve,
)
from storage_core.reconcile.conditions import Health, conditions_for, parse_rfc3339

FINALIZER = "tierkeeper.io/tiered-cluster"
"""Held on every live TieredCluster; released once nothing names it (module docstring)."""
NAME_TOO_LONG = (
    "metadata.name is longer than 63 characters: it becomes the Jobs' tierkeeper.io/cluster label value"
)
MemberT = TypeVar("MemberT", bound=ClusterMemberSpec)
BUCKET_RETRY_SECONDS = 60
"""A failed bucket check is run again this long after it ended (a fixed Secret or bucket is seen then)."""
BUCKET_RECHECK_SECONDS = 3600
"""A passed bucket check is repeated this often (credentials expire, policies change)."""


@dataclass(frozen=True)
class ClusterObject:
    """One TieredCluster as listed, with the bootstrap address its Strimzi Kafka reports (if any)."""

    namespace: str
    name: str
    generation: int | None
    created: str
    """metadata.creationTimestamp: of two clashing TieredClusters the older one stays in effect."""
    spec: Parsed[TieredClusterSpec]
    status: TieredClusterStatus
    deleting: bool = False
    strimzi_bootstrap: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Directory:
    """What the TieredClusters and the file entries make of the cluster names."""

    clusters: dict[str, KafkaClusterConfig] = field(default_factory=dict)
    """In effect, by name: the file entries and every TieredCluster accepted."""
    namespaces: dict[str, set[str]] = field(default_factory=dict)
    """Name -> namespaces whose TieredCluster of that name is in effect (file entries: none)."""
    files: frozenset[str] = frozenset()
    """Names of the file entries (they serve every namespace)."""
    refused: dict[str, Health] = field(default_factory=dict)
    """TieredCluster key -> why it is not in effect."""
    elsewhere: dict[str, str] = field(default_factory=dict)
    """Name -> a namespace holding a TieredCluster of that name (for one-line refusals)."""

    def member_problem(self, namespace: str, cluster: str) -> str | None:
        """Why a TieredTopic or TieredBroker in ``namespace`` may not name ``cluster`` (None: it may, or the
        name is unknown altogether, which the planner says itself)."""
        if cluster in self.files or namespace in self.namespaces.get(cluster, set()):
            return None
        if cluster in self.clusters or cluster in self.elsewhere:
            other = sorted(self.namespaces.get(cluster) or {self.elsewhere.get(cluster, "?")})[0]
            return (
                f"spec.clusterRef.name: TieredCluster {cluster!r} is in namespace {other}, not {namespace}; "
                "a TieredCluster serves the TieredTopics and TieredBrokers of its own namespace"
            )
        return None


def settings_key(cluster: KafkaClusterConfig) -> str:
    """A fingerprint of everything a cluster configuration says."""
    text = json.dumps(cluster.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def bucket_key(cluster: KafkaClusterConfig) -> str:
    """A fingerprint of what the bucket check depends on: the remote tier and how Jobs run."""
    text = json.dumps(
        [cluster.remote.model_dump(mode="json"), cluster.jobs.model_dump(mode="json")],
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def directory(objects: Iterable[ClusterObject], files: Mapping[str, KafkaClusterConfig]) -> Directory:
    out = Directory(clusters=dict(files), files=frozenset(files))
    for obj in sorted(objects, key=lambda o: (o.created, o.key)):
        out.elsewhere.setdefault(obj.name, obj.namespace)
        if obj.spec.value is None:
            out.refused[obj.key] = Health(
                False, "InvalidSpec", obj.spec.problem or "invalid spec", stalled=True
            )
            continue
        if len(obj.name) > 63:
            out.refused[obj.key] = Health(False, "InvalidName", NAME_TOO_LONG, stalled=True)
            continue
        try:
            config = resolve(obj.name, obj.spec.value, obj.strimzi_bootstrap)
        except ValueError as exc:  # a Strimzi Kafka not ready yet; retried every round
            out.refused[obj.key] = Health(False, "WaitingForBootstrap", str(exc), reconciling=True)
            continue
        present = out.clusters.get(obj.name)
        if present is not None and settings_key(present) != settings_key(config):
            if obj.name in files:
                where = "the operator's --cluster file entry (values clusters:), which stays in effect"
            else:
                where = f"TieredCluster {sorted(out.namespaces[obj.name])[0]}/{obj.name}, which is older"
            out.refused[obj.key] = Health(
                False,
                "NameConflict",
                f"cluster name {obj.name!r} is also defined, with other settings, by {where}; one operator "
                "runs one cluster per name: make the settings the same or rename one",
                stalled=True,
            )
            continue
        out.clusters[obj.name] = config
        out.namespaces.setdefault(obj.name, set()).add(obj.namespace)
    return out


def admitted(namespace: str, parsed: Parsed[MemberT], where: Directory) -> Parsed[MemberT]:
    """``parsed`` as the planner should see it: refused when its clusterRef names a TieredCluster of another
    namespace (:meth:`Directory.member_problem`)."""
    if parsed.value is None:
        return parsed
    problem = where.member_problem(namespace, parsed.value.cluster_ref.name)
    return parsed if problem is None else Parsed(None, problem)


@dataclass(frozen=True)
class Members:
    """The TieredTopics and TieredBrokers naming one TieredCluster, and their sums."""

    topics: int = 0
    brokers: int = 0
    tiered_bytes: int = 0
    copy_lag_bytes: int = 0


def bucket_check_due(check: BucketCheck | None, key: str, running: bool, now: datetime.datetime) -> bool:
    """Whether a new bucket-check Job should start: none for these settings yet, or the last one is old
    enough to repeat (:data:`BUCKET_RETRY_SECONDS` after a failure, :data:`BUCKET_RECHECK_SECONDS` after a
    pass); never while one runs."""
    if running:
        return False
    if check is None or check.spec_key != key or check.reachable is None or check.checked_at is None:
        return True  # never checked, new settings, or a started check that left no verdict
    age = (now - parse_rfc3339(check.checked_at)).total_seconds()
    return age >= (BUCKET_RECHECK_SECONDS if check.reachable else BUCKET_RETRY_SECONDS)


def decode_bucket_check(message: str | None, job: str, state: str) -> tuple[bool, str]:
    """The verdict a bucket-check Job left as its termination message (``tierkeeper check-remote``)."""
    try:
        data = json.loads(message or "")
        return bool(data["reachable"]), str(data.get("message") or "")
    except (ValueError, KeyError, TypeError):
        return False, f"bucket check Job {job} {state.lower()} without a result (see its pod's log)"


@dataclass(frozen=True)
class GatewayOutlook:
    """The gateway as this round left it (``spec.gateway.enabled``)."""

    state: GatewayState | None = None
    problem: str | None = None
    """One line: its objects could not be built or written."""
    lasting: bool = True
    """The problem needs a person (a spec no gateway can be built from), not just another round."""


def health(
    obj: ClusterObject,
    where: Directory,
    kafka: KafkaCheck | None,
    bucket: BucketCheck | None,
    members: Members,
    bucket_spec_key: str | None,
    gateway: GatewayOutlook | None = None,
) -> Health:
    """The TieredCluster's verdict, first problem first: not in effect, being deleted, Kafka, bucket,
    gateway."""
    refused = where.refused.get(obj.key)
    if refused is not None:
        return refused
    if obj.deleting:
        waiting = f"{members.topics} TieredTopics and {members.brokers} TieredBrokers"
        return Health(
            False,
            "Deleting",
            f"being deleted: waits until no TieredTopic or TieredBroker names it ({waiting} do); no tier "
            "is deleted with it",
            reconciling=True,
        )
    if kafka is not None and not kafka.reachable:
        return Health(False, "KafkaUnreachable", f"Kafka: {kafka.message}", reconciling=True, warning=True)
    if bucket is None or bucket.spec_key != bucket_spec_key or bucket.reachable is None:
        job = f" (Job {bucket.job})" if bucket is not None and bucket.job else ""
        return Health(False, "CheckingBucket", f"checking the remote tier{job}", reconciling=True)
    if not bucket.reachable:
        # The check Job's own line usually names the remote tier already ("remote tier s3://b: ...").
        said = bucket.message or "unreachable"
        message = said if said.startswith("remote tier") else f"remote tier: {said}"
        return Health(False, "BucketUnreachable", message, stalled=True)
    if kafka is None:
        return Health(False, "CheckingKafka", "waiting for the first Kafka check", reconciling=True)
    wanted = obj.spec.value.gateway.replicas if obj.spec.value and obj.spec.value.gateway.enabled else 0
    if gateway is not None and gateway.problem:
        lasting = gateway.lasting
        message = f"gateway: {gateway.problem}"
        return Health(False, "GatewayProblem", message, stalled=lasting, reconciling=not lasting)
    ready = gateway.state.ready_replicas if gateway is not None and gateway.state is not None else 0
    if wanted and ready < wanted:
        return Health(False, "GatewayNotReady", f"gateway: {ready} of {wanted} pods ready", reconciling=True)
    return Health(
        True,
        "Ready",
        f"Kafka {kafka.bootstrap_servers} ({len(kafka.broker_ids)} brokers) and the remote tier reachable; "
        f"{members.topics} TieredTopics, {members.brokers} TieredBrokers",
    )


def status(
    obj: ClusterObject,
    verdict: Health,
    kafka: KafkaCheck | None,
    bucket: BucketCheck | None,
    members: Members,
    gateway: GatewayState | None,
    now: datetime.datetime,
    strimzi: StrimziSummary | None = None,
) -> TieredClusterStatus:
    conditions = conditions_for(verdict, obj.generation, obj.status.conditions, now)
    return TieredClusterStatus(
        observed_generation=obj.generation,
        message=verdict.message,
        conditions=conditions,
        kafka=kafka,
        bucket=bucket,
        tiered_topics=members.topics,
        tiered_brokers=members.brokers,
        tiered_bytes=members.tiered_bytes,
        copy_lag_bytes=members.copy_lag_bytes,
        gateway=gateway,
        strimzi=strimzi,
    )


def may_release(obj: ClusterObject, members: Members) -> bool:
    """A deleted TieredCluster's finalizer goes once nothing names it."""
    return obj.deleting and members.topics == 0 and members.brokers == 0
