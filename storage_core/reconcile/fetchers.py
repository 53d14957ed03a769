"""Decide a TieredBroker's num.replica.fetchers: propose a count, wait for approval, apply it in steps.

Pure, like the planner (:mod:`storage_core.reconcile.planner`): the caller observes Kafka (the live
assignment, the count the broker reports), passes the previous :class:`FetcherStatus` and the user's
annotation, and carries out the one step returned (IncrementalAlterConfigs, then DescribeConfigs until it
is in effect). The operator and ``tierkeeper standalone`` share it.

The life of a change follows Strimzi's KafkaRebalance:

- A proposal is computed when there is none, when ``spec.replicaFetchers`` changed, on the annotation
  ``tierkeeper.io/fetchers: refresh``, and when the assignment or the broker's count changed, at most
  once per ``replanIntervalSeconds`` (a leader election storm must not replan every round).
- ``ProposalReady`` waits for ``tierkeeper.io/fetchers: approve`` (or ``autoApprove``, or the standalone
  flag); ``mode: fixed`` needs no approval, the spec is the decision. The resource stays Ready and gets
  the condition ``FetcherChangePending``: a change waiting for a person is not progress, and
  Reconciling would hold Flux and ``kubectl wait`` forever.
- ``Applying`` sets one step at a time; each must be in effect before the next (Kafka accepts a new
  thread count only within [old/2, 2*old]). ``stop`` halts between steps (``Stopped``: the broker keeps
  the last step; ``refresh`` plans again). A step that does not take effect is ``Failed`` (Stalled).
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from storage_core.api.resources import ReplicaFetchers
from storage_core.api.status import (
    FETCHER_CHANGE_PENDING,
    Condition,
    FetcherLoad,
    FetcherStatus,
    TieredBrokerStatus,
)
from storage_core.fetchers.model import Assignment, FetchGroup, fetch_groups
from storage_core.fetchers.planner import BrokerReport, recommend_broker, step_plan
from storage_core.reconcile.conditions import Health, conditions_for, parse_rfc3339, rfc3339

ANNOTATION = "tierkeeper.io/fetchers"
COMMANDS = ("approve", "refresh", "stop")
APPROVE_BY_ANNOTATION = f"the annotation {ANNOTATION}=approve"
Command = Literal["approve", "refresh", "stop"]


@dataclass(frozen=True)
class ClusterFetchers:
    """One cluster's assignment, observed once per round and shared by all of its TieredBrokers."""

    brokers: tuple[int, ...]
    groups: Mapping[int, tuple[FetchGroup, ...]]
    """Fetch groups by follower broker."""
    fingerprint: str
    """Changes whenever the assignment does (topics, partitions, replicas, leaders, brokers)."""


def cluster_fetchers(assignment: Assignment) -> ClusterFetchers:
    by_follower: dict[int, list[FetchGroup]] = defaultdict(list)
    for group in fetch_groups(assignment):
        by_follower[group.follower].append(group)
    text = json.dumps(
        [sorted(assignment.brokers), sorted((t, [list(r) for r in p]) for t, p in assignment.topics.items())],
        separators=(",", ":"),
    )
    return ClusterFetchers(
        brokers=tuple(sorted(assignment.brokers)),
        groups={b: tuple(gs) for b, gs in by_follower.items()},
        fingerprint=hashlib.sha256(text.encode()).hexdigest()[:16],
    )


@dataclass(frozen=True)
class FetcherObservation:
    """What the caller saw of one broker this round: the cluster's assignment and the broker's count,
    or why it could not look."""

    cluster: ClusterFetchers | None = None
    current: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class FetcherEvent:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class FetcherDecision:
    status: FetcherStatus | None
    """None when the spec does not manage fetchers."""
    set_value: int | None = None
    """The step to set now (then wait until the broker reports it)."""
    consumed: bool = False
    """The annotation was read: remove it, as Strimzi does, so it is not acted on twice."""
    events: tuple[FetcherEvent, ...] = field(default_factory=tuple)


def parse_command(annotations: Mapping[str, str] | None) -> tuple[Command | None, str | None]:
    """The annotation's command, or a one-line problem when it holds something else."""
    raw = (annotations or {}).get(ANNOTATION)
    if raw is None:
        return None, None
    value = raw.strip().lower()
    if value in COMMANDS:
        return value, None  # type: ignore[return-value]
    return None, f"{ANNOTATION}={raw!r} is not one of {', '.join(COMMANDS)}; ignored"


def shared_brokers(owners: Sequence[tuple[str, str, int]]) -> dict[str, str]:
    """Keys of TieredBrokers that manage a (cluster, broker id) another one manages too, each with a
    one-line reason: two owners of one broker's count would undo each other's steps, so neither acts."""
    by_broker: dict[tuple[str, int], list[str]] = defaultdict(list)
    for key, cluster, broker in owners:
        by_broker[(cluster, broker)].append(key)
    out = {}
    for (_, broker), keys in by_broker.items():
        if len(keys) > 1:
            for key in keys:
                out[key] = (
                    f"broker {broker}'s fetchers are managed by {len(keys)} TieredBrokers "
                    f"({', '.join(sorted(keys))}); nothing is set until one remains"
                )
    return out


def spec_key(spec: ReplicaFetchers) -> str:
    # Only what changes the proposal; autoApprove and the intervals do not.
    return f"{spec.mode}:{spec.minimum}-{spec.maximum}:{spec.value}"


def _observed_key(cluster: ClusterFetchers, current: int) -> str:
    return f"{cluster.fingerprint}/{current}"


def load(report: BrokerReport, fetchers: int) -> FetcherLoad:
    busiest = report.busiest_thread
    return FetcherLoad(
        fetchers=fetchers,
        leaders=report.leaders,
        partitions=report.partitions,
        threads_used=report.threads_used,
        idle_threads=report.idle_threads,
        busiest_thread=(
            f"ReplicaFetcherThread-{busiest.fetcher_id}-{busiest.leader}" if busiest is not None else None
        ),
        busiest_thread_load=report.max_load,
        mean_load=report.mean_load,
        perfect_groups=report.perfect_groups,
    )


def imbalance(report: BrokerReport) -> float:
    """Busiest thread over the mean slot load: 1.0 when spread perfectly, 0 for a broker following nothing."""
    return report.max_load / report.mean_load if report.mean_load else 0.0


def _propose(
    spec: ReplicaFetchers,
    broker: int,
    cluster: ClusterFetchers,
    current: int,
    approved: bool,
    now: datetime.datetime,
    how_to_approve: str,
) -> tuple[FetcherStatus, tuple[FetcherEvent, ...]]:
    groups = cluster.groups.get(broker, ())
    if spec.mode == "fixed":
        assert spec.value is not None  # the model's rule
        rec = recommend_broker(groups, broker, len(cluster.brokers), current, spec.value, spec.value)
    else:
        rec = recommend_broker(groups, broker, len(cluster.brokers), current, spec.minimum, spec.maximum)
    target = rec.recommended
    proposed = current if not rec.steps else rec.steps[-1]
    status = FetcherStatus(
        phase="Balanced",
        mode=spec.mode,
        current=current,
        proposed=proposed,
        steps=list(rec.steps),
        before=load(rec.current, current),
        after=load(target, proposed),
        imbalance=round(imbalance(rec.current), 4),
        explanation=rec.explanation,
        planned_at=rfc3339(now),
        observed=_observed_key(cluster, current),
        spec_key=spec_key(spec),
    )
    if not rec.steps:
        return status.model_copy(update={"message": f"num.replica.fetchers={current} is the best count"}), ()
    idle = rec.current.idle_threads
    change = (
        f"proposed num.replica.fetchers {current} -> {proposed} in steps "
        f"{' -> '.join(map(str, (current, *rec.steps)))} (busiest thread "
        f"{rec.current.max_load:g} -> {target.max_load:g}, {idle} idle thread slots now)"
    )
    if spec.mode == "fixed" or approved:
        status = status.model_copy(update={"phase": "Applying", "message": f"applying: {change}"})
        return status, (FetcherEvent("Normal", "FetcherChangeStarted", change),)
    message = f"{change}; approve with {how_to_approve}"
    status = status.model_copy(update={"phase": "ProposalReady", "message": message})
    return status, (FetcherEvent("Normal", "FetcherProposal", message),)


def _replan_due(
    spec: ReplicaFetchers,
    previous: FetcherStatus,
    cluster: ClusterFetchers,
    current: int,
    now: datetime.datetime,
) -> bool:
    if previous.phase not in ("Balanced", "ProposalReady"):
        return False  # Applying runs to its end; Stopped and Failed wait for refresh or a spec change
    if previous.observed == _observed_key(cluster, current):
        return False
    if spec.mode == "fixed" or previous.planned_at is None:
        return True  # fixed: bring a count someone changed back at once
    elapsed = (now - parse_rfc3339(previous.planned_at)).total_seconds()
    return elapsed >= spec.replan_interval_seconds


def decide(
    spec: ReplicaFetchers | None,
    broker: int,
    observed: FetcherObservation,
    previous: FetcherStatus | None,
    command: Command | None,
    now: datetime.datetime,
    *,
    approve: bool = False,
    how_to_approve: str = APPROVE_BY_ANNOTATION,
) -> FetcherDecision:
    """The broker's next fetcher status and at most one step to set now.

    ``approve``: the caller approves every proposal (``tierkeeper standalone --approve-fetchers``);
    ``how_to_approve`` completes the pending proposal's message ("approve with ...").
    """
    if spec is None:
        return FetcherDecision(None, consumed=command is not None)
    approved = approve or spec.auto_approve
    base = previous if previous is not None and previous.spec_key == spec_key(spec) else None
    if observed.error is not None or observed.cluster is None or observed.current is None:
        why = observed.error or "not observed"
        kept = base or FetcherStatus(phase="Pending", mode=spec.mode, spec_key=spec_key(spec))
        # A command cannot be carried out blind; leave the annotation for a round that can see Kafka.
        return FetcherDecision(kept.model_copy(update={"message": f"cannot observe the broker: {why}"}))
    cluster, current = observed.cluster, observed.current
    events: list[FetcherEvent] = []
    consumed = command is not None

    status: FetcherStatus
    if (
        base is None
        or base.phase == "Pending"
        or command == "refresh"
        or _replan_due(spec, base, cluster, current, now)
    ):
        status, new_events = _propose(spec, broker, cluster, current, approved, now, how_to_approve)
        events += new_events
        if command in ("approve", "stop"):
            events.append(
                FetcherEvent("Warning", "FetcherCommandIgnored", f"{command}: a new proposal was made")
            )
    elif command == "stop" and base.phase in ("ProposalReady", "Applying"):
        message = f"stopped by {ANNOTATION}=stop at num.replica.fetchers={current}; refresh to plan again"
        status = base.model_copy(update={"phase": "Stopped", "current": current, "message": message})
        events.append(FetcherEvent("Normal", "FetcherChangeStopped", message))
    elif base.phase == "ProposalReady" and (command == "approve" or approved):
        status = base.model_copy(update={"phase": "Applying", "message": f"applying: {base.message}"})
        events.append(FetcherEvent("Normal", "FetcherChangeStarted", f"approved: {base.message}"))
    else:
        status = base.model_copy(update={"current": current})
        if command in ("approve", "stop"):
            events.append(
                FetcherEvent(
                    "Warning",
                    "FetcherCommandIgnored",
                    f"{command} ignored: nothing to {command} (phase {base.phase})",
                )
            )

    if status.phase != "Applying":
        return FetcherDecision(status, consumed=consumed, events=tuple(events))
    assert status.proposed is not None
    if current == status.proposed:
        message = (
            f"num.replica.fetchers={current} in effect (steps {' -> '.join(map(str, status.applied)) or '-'})"
        )
        done = status.model_copy(
            update={
                "phase": "Balanced",
                "current": current,
                "message": message,
                "observed": _observed_key(cluster, current),
            }
        )
        events.append(FetcherEvent("Normal", "FetcherChangeApplied", message))
        return FetcherDecision(done, consumed=consumed, events=tuple(events))
    expected = (
        status.applied[-1] if status.applied else (status.before.fetchers if status.before else current)
    )
    remaining = list(status.steps[len(status.applied) :])
    if current != expected or not remaining:
        # Someone changed the count between our steps: plan the rest from what the broker runs.
        remaining = list(step_plan(current, status.proposed))
        status = status.model_copy(update={"steps": [*status.applied, *remaining]})
    return FetcherDecision(status, set_value=remaining[0], consumed=consumed, events=tuple(events))


def after_step(status: FetcherStatus, value: int, now: datetime.datetime) -> FetcherStatus:
    """Fold in a step the broker reports in effect."""
    applied = [*status.applied, value]
    total = len(status.steps)
    return status.model_copy(
        update={
            "current": value,
            "applied": applied,
            "last_step_at": rfc3339(now),
            "message": f"applying: step {len(applied)} of {total} in effect (num.replica.fetchers={value})",
        }
    )


def step_failed(status: FetcherStatus, value: int, problem: str, now: datetime.datetime) -> FetcherStatus:
    return status.model_copy(
        update={
            "phase": "Failed",
            "last_step_at": rfc3339(now),
            "message": f"setting num.replica.fetchers={value} failed: {problem}; refresh to plan again",
        }
    )


def health_with_fetchers(base: Health, fetchers: FetcherStatus | None) -> Health:
    """The broker's health with its fetcher change folded in: Applying is progress (Reconciling),
    Failed stalls it; a proposal waiting for approval changes nothing here (its own condition)."""
    if fetchers is None or base.stalled or not base.ready:
        return base
    if fetchers.phase == "Failed":
        return Health(False, "FetcherChangeFailed", fetchers.message, stalled=True)
    if fetchers.phase == "Applying":
        return Health(True, "FetcherChangeApplying", fetchers.message, reconciling=True)
    return base


def broker_conditions(
    health: Health,
    fetchers: FetcherStatus | None,
    generation: int | None,
    previous: Sequence[Condition],
    now: datetime.datetime,
) -> list[Condition]:
    """kstatus conditions plus FetcherChangePending (present while fetchers are managed)."""
    conditions = conditions_for(health_with_fetchers(health, fetchers), generation, previous, now)
    if fetchers is None:
        return conditions
    pending = fetchers.phase == "ProposalReady"
    status: Literal["True", "False"] = "True" if pending else "False"
    transition = rfc3339(now)
    for old in previous:
        if old.type == FETCHER_CHANGE_PENDING and old.status == status:
            transition = old.last_transition_time
    conditions.append(
        Condition(
            type=FETCHER_CHANGE_PENDING,
            status=status,
            reason="ProposalPending" if pending else fetchers.phase,
            message=fetchers.message,
            last_transition_time=transition,
            observed_generation=generation,
        )
    )
    return conditions


def health_of(status: TieredBrokerStatus) -> Health:
    """Read back the verdict the planner wrote into ``status`` (its Ready/Reconciling/Stalled)."""
    by_type = {c.type: c for c in status.conditions}
    ready = by_type.get("Ready")
    if ready is None:
        return Health(False, "Unknown", status.message)
    return Health(
        ready.status == "True",
        ready.reason,
        ready.message,
        reconciling="Reconciling" in by_type and by_type["Reconciling"].status == "True",
        stalled="Stalled" in by_type and by_type["Stalled"].status == "True",
    )
