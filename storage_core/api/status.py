"""Status models of TieredTopic and TieredBroker: written by the operator (or printed by standalone mode).

Conditions follow kstatus (sigs.k8s.io/cli-utils/pkg/kstatus): ``Ready`` is always present;
``Reconciling`` and ``Stalled`` appear only while they are True, so tools that read kstatus (Flux,
``kubectl wait``, Argo) need no custom health check. ``observedGeneration`` is always written.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from storage_core.api.rules import ApiModel
from storage_core.api.trim_hold_status import TrimHoldStatus

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
FETCHER_CHANGE_PENDING = "FetcherChangePending"


class Condition(ApiModel):
    """A Kubernetes-style condition."""

    type: str = Field(
        description="Ready, Reconciling, Stalled, (TieredTopic) TrimHeld or (TieredBroker) "
        "FetcherChangePending."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word saying why.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str = Field(description="RFC 3339 time the status last changed.")
    observed_generation: int | None = Field(
        default=None, description="metadata.generation the condition was computed from."
    )


class RunOutcome(ApiModel):
    """How the last copy, cleanup, export or table maintenance run touching this object ended."""

    time: str = Field(description="RFC 3339 time the run ended.")
    result: Literal["Succeeded", "Failed"] = Field(description="Succeeded or Failed.")
    message: str = Field(default="", description="One line: what was done, or why it failed.")
    job: str | None = Field(default=None, description="The Job that ran it (Kubernetes only).")
    failures_in_a_row: int = Field(
        default=0,
        ge=0,
        description="Runs of this kind that failed in a row, this one included (0 after a success). The "
        "resource is Stalled once it reaches 3 (storage_core.reconcile.conditions.FAILURES_BEFORE_STALLED); "
        "before that a failure is retried and reads Reconciling.",
    )


class PartitionTier(ApiModel):
    """One partition's remote tier."""

    partition: int = Field(ge=0, description="Partition number.")
    start_offset: int | None = Field(default=None, description="First offset held remotely.")
    end_offset: int | None = Field(default=None, description="Last offset held remotely.")
    segments: int = Field(default=0, ge=0, description="Segments held remotely.")
    bytes: int = Field(default=0, ge=0, description="Bytes held remotely.")
    lag_segments: int = Field(default=0, ge=0, description="Rolled segments on the leader not yet tiered.")
    lag_bytes: int = Field(default=0, ge=0, description="Their bytes.")


class RemoteSummary(ApiModel):
    """What the remote tier holds for the topic (its current incarnation)."""

    segments: int = Field(default=0, ge=0, description="Segments in the remote tier.")
    bytes: int = Field(default=0, ge=0, description="Bytes of segment data in the remote tier.")
    partitions: list[PartitionTier] = Field(
        default_factory=list, description="Remote offsets, size and copy lag per partition."
    )


class CopyLag(ApiModel):
    """Rolled segments on the leaders not yet in the remote tier (the active segment is never counted)."""

    segments: int = Field(default=0, ge=0, description="Rolled segments not yet tiered.")
    bytes: int = Field(default=0, ge=0, description="Their bytes.")


class PartitionPosition(ApiModel):
    """How far one partition is in the table."""

    partition: int = Field(ge=0, description="Partition number.")
    next_offset: int = Field(ge=0, description="Every record below this offset is in the table, none above.")


class TableStatus(ApiModel):
    """The Iceberg table kept current from the topic's remote tier (spec.table)."""

    name: str | None = Field(default=None, description="The table's name in its catalog.")
    location: str | None = Field(default=None, description="The table's directory.")
    snapshot_id: int | None = Field(default=None, description="The table's current snapshot.")
    rows: int | None = Field(default=None, ge=0, description="Rows in the current snapshot.")
    exported: list[PartitionPosition] = Field(
        default_factory=list, description="Per partition, the next offset the table lacks."
    )
    lag_offsets: int | None = Field(
        default=None,
        ge=0,
        description="Offsets held by the remote tier and not yet in the table (summed over partitions; "
        "transaction markers and aborted records count too).",
    )
    last_export: RunOutcome | None = Field(default=None, description="The last export run.")
    last_maintenance: RunOutcome | None = Field(default=None, description="The last maintenance run.")


class ResourceStatus(ApiModel):
    """Status fields both resources have."""

    observed_generation: int | None = Field(
        default=None, description="metadata.generation of the spec the operator last handled."
    )
    message: str = Field(default="", description="One line: the state, or what is wrong.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready (always), Reconciling and Stalled (only while True), as kstatus reads them.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class TieredTopicStatus(ResourceStatus):
    """Observed state of a TieredTopic."""

    topic_id: str | None = Field(default=None, description="Kafka's id of the topic being tiered.")
    remote: RemoteSummary | None = Field(default=None, description="What the remote tier holds.")
    copy_lag: CopyLag | None = Field(default=None, description="What is not yet tiered.")
    last_copy: RunOutcome | None = Field(default=None, description="The last copy round of this topic.")
    last_cleanup: RunOutcome | None = Field(default=None, description="The last cleanup run of this topic.")
    table: TableStatus | None = Field(default=None, description="The Iceberg table (spec.table).")
    trim_hold: TrimHoldStatus | None = Field(
        default=None, description="What holds the local trim: direct readers' offsets (spec.trimHold)."
    )


class RebuildStatus(ApiModel):
    """The last rebuild of the broker's log directory from the remote tier: by the init container of the
    broker's pod (policy WhenLogDirEmpty) or by a rebuild Job the operator ran on request."""

    phase: Literal["Blocked", "Running", "Succeeded", "Skipped", "Failed"] = Field(
        description="Blocked (a pod uses the volume read-write; the requested Job waits), Running, "
        "Succeeded (data restored, or an interrupted restore completed), Skipped (the log dir held data "
        "or nothing was tiered: nothing to do) or Failed (the broker does not start on it)."
    )
    source: Literal["InitContainer", "Job", "Standalone"] = Field(description="What ran the rebuild.")
    action: str = Field(
        default="",
        description="What the rebuild did: rebuilt, resumed, installed, already-rebuilt, nothing-to-restore "
        "or skipped.",
    )
    start_time: str | None = Field(default=None, description="RFC 3339 time the rebuild started.")
    end_time: str | None = Field(default=None, description="RFC 3339 time the rebuild ended.")
    partitions_restored: int = Field(default=0, ge=0, description="Partitions that got data restored.")
    bytes_restored: int = Field(default=0, ge=0, description="Bytes of segments restored.")
    expected_tail: int = Field(
        default=0, ge=0, description="Offsets the broker still replicates from the leaders once started."
    )
    message: str = Field(default="", description="One line: what was done, or why it failed.")
    pod: str | None = Field(default=None, description="The pod (init container) or Job pod that ran it.")
    job: str | None = Field(default=None, description="The rebuild Job (requested rebuilds only).")


class HandledRequests(ApiModel):
    """The ids of the one-shot requests in the spec the operator has acted on (never acted on again)."""

    rebuild: str | None = Field(default=None, description="spec.rebuild.requestId last acted on.")
    fetchers: str | None = Field(default=None, description="spec.replicaFetchers.request.id last acted on.")


class TieredBrokerStatus(ResourceStatus):
    """Observed state of a TieredBroker."""

    requests: HandledRequests | None = Field(
        default=None, description="Request ids of the spec acted on (GitOps-safe one-shot actions)."
    )

    last_copy: RunOutcome | None = Field(default=None, description="The last copy Job on this broker.")
    rebuild: RebuildStatus | None = Field(
        default=None, description="The last rebuild of the broker's log directory from the remote tier."
    )
    fetchers: FetcherStatus | None = Field(
        default=None, description="num.replica.fetchers management (spec.replicaFetchers)."
    )


class FetcherLoad(ApiModel):
    """How one fetcher count splits the partitions this broker follows into its fetcher threads."""

    fetchers: int = Field(ge=1, description="num.replica.fetchers these figures are for.")
    leaders: int = Field(default=0, ge=0, description="Leader brokers this broker follows partitions of.")
    partitions: int = Field(default=0, ge=0, description="Partitions this broker follows.")
    threads_used: int = Field(default=0, ge=0, description="Fetcher threads that carry a partition.")
    idle_threads: int = Field(
        default=0, ge=0, description="Thread slots (fetchers per leader followed) that carry none."
    )
    busiest_thread: str | None = Field(
        default=None, description="The busiest thread, as Kafka names it: ReplicaFetcherThread-<id>-<leader>."
    )
    busiest_thread_load: float = Field(
        default=0.0, ge=0, description="Partitions (or bytes/s, with byte rates) of the busiest thread."
    )
    mean_load: float = Field(default=0.0, ge=0, description="What each slot would carry if spread perfectly.")
    perfect_groups: int = Field(
        default=0, ge=0, description="Leaders whose partitions are split as evenly as any count allows."
    )


FetcherPhase = Literal["Pending", "Balanced", "ProposalReady", "Applying", "Stopped", "Failed"]


class FetcherStatus(ApiModel):
    """The broker's num.replica.fetchers: what it runs, what is proposed, and how a change goes."""

    phase: FetcherPhase = Field(
        description="Pending (not observed yet), Balanced (runs the proposed count), ProposalReady (waits "
        "for the annotation tierkeeper.io/fetchers=approve), Applying, Stopped (tierkeeper.io/fetchers=stop; "
        "refresh to plan again) or Failed."
    )
    mode: Literal["auto", "fixed"] = Field(description="spec.replicaFetchers.mode this was planned for.")
    current: int | None = Field(default=None, description="num.replica.fetchers the broker reports now.")
    proposed: int | None = Field(default=None, description="The count Tierkeeper proposes (or is applying).")
    steps: list[int] = Field(
        default_factory=list,
        description="Values to set in order; Kafka accepts each only within [old/2, 2*old].",
    )
    applied: list[int] = Field(default_factory=list, description="Steps set and reported in effect so far.")
    before: FetcherLoad | None = Field(default=None, description="Fetcher threads at the current count.")
    after: FetcherLoad | None = Field(default=None, description="Fetcher threads at the proposed count.")
    imbalance: float | None = Field(
        default=None,
        description="Busiest thread over mean slot load at the current count (1 is perfect; also a metric).",
    )
    explanation: str = Field(default="", description="What the change does, and why.")
    message: str = Field(default="", description="One line: the state, or what went wrong.")
    planned_at: str | None = Field(default=None, description="RFC 3339 time the proposal was computed.")
    last_step_at: str | None = Field(default=None, description="RFC 3339 time of the last step.")
    observed: str = Field(
        default="",
        description="Fingerprint of the replica assignment and count the proposal was planned from.",
    )
    spec_key: str = Field(default="", description="Fingerprint of spec.replicaFetchers the proposal is for.")
