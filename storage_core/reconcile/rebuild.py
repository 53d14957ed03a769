"""Rebuild decisions for one TieredBroker, and the result a rebuild leaves for them to read.

Two ways a broker's log dir gets rebuilt from the remote tier:
- the init container of the broker's pod (``tierkeeper rebuild --if-empty``), which reports its result
  as its termination message (:func:`encode_result`);
- a rebuild Job the operator runs on the broker's volume when the user asks for one with the annotation
  ``tierkeeper.io/rebuild: run`` while holding the broker (scaled down, or its pod deleted). The Job never
  starts while a pod uses the volume read-write: the status says Blocked and names the pods.

Pure: the operator observes the pods and Jobs and executes the step; ``tierkeeper standalone`` folds its
in-process run in through :func:`status_from_result` too.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from storage_core.api.resources import TieredBrokerSpec
from storage_core.api.status import READY, RECONCILING, STALLED, Condition, RebuildStatus, TieredBrokerStatus
from storage_core.reconcile.conditions import Health, conditions_for, rfc3339
from storage_core.reconcile.planner import Event
from storage_core.reconcile.results import VERSION, read_result
from storage_core.reconcile.text import one_line

REQUEST_ANNOTATION = "tierkeeper.io/rebuild"
REQUEST_VALUE = "run"
INIT_CONTAINER = "tierkeeper-rebuild"
"""The name the init container must have for the operator to read its result."""
LIMIT = 4096
MAX_MESSAGE = 300
# Actions after which there was nothing to do: they do not replace the record of a real rebuild.
QUIET_ACTIONS = frozenset({"skipped", "already-rebuilt"})
Source = Literal["InitContainer", "Job", "Standalone"]


def _cut(text: str, limit: int = MAX_MESSAGE) -> str:
    return one_line(text, limit)


# ---- the result ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RebuildResult:
    """What one run of ``tierkeeper rebuild`` did (or why it failed)."""

    action: str = ""
    reason: str = ""
    partitions_restored: int = 0
    bytes_restored: int = 0
    expected_tail: int = 0
    failure: str | None = None


def encode_result(result: RebuildResult) -> str:
    """Compact JSON for a termination message (Kubernetes keeps at most 4096 bytes)."""
    document: dict[str, Any] = {"v": VERSION, "kind": "rebuild"}
    if result.failure is not None:
        document["failure"] = _cut(result.failure, 1000)
    else:
        document.update(
            action=result.action,
            partitions=result.partitions_restored,
            bytes=result.bytes_restored,
            tail=result.expected_tail,
        )
        if result.reason:
            document["reason"] = _cut(result.reason, 1000)
    return json.dumps(document, separators=(",", ":"))[:LIMIT]


def decode_result(text: str | None) -> RebuildResult:
    """The result a run left; an unreadable or missing one is a failure (a killed run leaves none)."""
    try:
        document = read_result(text, "rebuild")
    except ValueError as exc:
        return RebuildResult(failure=f"the rebuild left no readable result ({_cut(str(exc), 120)})")
    if "failure" in document:
        return RebuildResult(failure=str(document["failure"]))
    return RebuildResult(
        action=str(document.get("action", "")),
        reason=str(document.get("reason", "")),
        partitions_restored=int(document.get("partitions", 0)),
        bytes_restored=int(document.get("bytes", 0)),
        expected_tail=int(document.get("tail", 0)),
    )


def status_from_result(
    result: RebuildResult,
    source: Source,
    *,
    start: str | None,
    end: str | None,
    pod: str | None = None,
    job: str | None = None,
) -> RebuildStatus:
    if result.failure is not None:
        return RebuildStatus(
            phase="Failed",
            source=source,
            start_time=start,
            end_time=end,
            message=_cut(result.failure),
            pod=pod,
            job=job,
        )
    quiet = result.action in QUIET_ACTIONS or result.action == "nothing-to-restore"
    if result.action == "skipped":
        message = result.reason or "nothing to do"
    elif result.action == "already-rebuilt":
        message = "the log dir was rebuilt before; nothing to do"
    elif result.action == "nothing-to-restore":
        message = "nothing tiered for this broker; it replicates everything"
    else:
        message = (
            f"{result.action}: {result.bytes_restored} bytes in {result.partitions_restored} partitions; "
            f"expected tail {result.expected_tail} offsets"
        )
    return RebuildStatus(
        phase="Skipped" if quiet else "Succeeded",
        source=source,
        action=result.action,
        start_time=start,
        end_time=end,
        partitions_restored=result.partitions_restored,
        bytes_restored=result.bytes_restored,
        expected_tail=result.expected_tail,
        message=_cut(message),
        pod=pod,
        job=job,
    )


def replaces(new: RebuildStatus, old: RebuildStatus | None) -> bool:
    """A run with nothing to do (every restart of a healthy broker's pod) does not overwrite the record
    of the last real rebuild or failure."""
    if old is None or new.phase != "Skipped":
        return True
    return old.phase == "Skipped"


# ---- what was observed ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class InitContainerView:
    """The rebuild init container of the broker's pod, from the pod's status."""

    pod: str
    running_since: str | None = None
    """startedAt while it runs."""
    started: str | None = None
    finished: str | None = None
    exit_code: int | None = None
    message: str | None = None
    """Its termination message (the --result-file)."""


@dataclass(frozen=True)
class JobView:
    """The newest rebuild Job of the broker."""

    name: str
    state: Literal["Running", "Succeeded", "Failed"]
    recorded: bool
    created: str
    message: str | None = None
    pod: str | None = None


@dataclass(frozen=True)
class RebuildInput:
    key: str
    spec: TieredBrokerSpec | None
    status: RebuildStatus | None
    requested: bool
    """The request annotation is set."""
    job: JobView | None = None
    init: InitContainerView | None = None
    users: tuple[str, ...] = ()
    """Pods (not the rebuild Job's) that use the broker's volume read-write."""
    unusable: str | None = None
    """Why no rebuild Job can run for this broker on this platform (e.g. no claim), if so."""


@dataclass
class RebuildStep:
    status: RebuildStatus | None
    start_job: bool = False
    clear_request: bool = False
    record_job: str | None = None
    """A finished Job whose result is now in the status: mark it recorded."""
    events: list[Event] = field(default_factory=list)


def _event(key: str, status: RebuildStatus) -> Event:
    reason = {"Succeeded": "RebuildSucceeded", "Failed": "RebuildFailed", "Skipped": "RebuildSkipped"}
    kind: Literal["Normal", "Warning"] = "Warning" if status.phase == "Failed" else "Normal"
    where = f"Job {status.job}" if status.job else f"pod {status.pod}" if status.pod else status.source
    return Event(key, kind, reason.get(status.phase, "Rebuild"), f"{where}: {status.message}")


def _from_init(view: InitContainerView, old: RebuildStatus | None) -> RebuildStatus | None:
    """The status the init container's state says, or None when it says nothing new."""
    if view.running_since is not None:
        if old is not None and old.phase == "Running" and old.start_time == view.running_since:
            return None
        return RebuildStatus(
            phase="Running",
            source="InitContainer",
            start_time=view.running_since,
            message="the broker's init container is restoring its log dir",
            pod=view.pod,
        )
    if view.finished is None:
        return None
    if (
        old is not None
        and old.source == "InitContainer"
        and old.pod == view.pod
        and old.end_time == view.finished
    ):
        return None
    if view.exit_code == 0:
        result = decode_result(view.message)
    else:
        failure = decode_result(view.message).failure or f"exited with code {view.exit_code}"
        result = RebuildResult(failure=f"init container exited with code {view.exit_code}: {failure}")
    return status_from_result(result, "InitContainer", start=view.started, end=view.finished, pod=view.pod)


def decide(item: RebuildInput, now: datetime.datetime) -> RebuildStep:
    """One round for one broker: fold in results, and start, hold back or leave the requested Job."""
    old = item.status
    step = RebuildStep(status=old)

    def update(new: RebuildStatus) -> None:
        if replaces(new, step.status):
            if new.phase in ("Succeeded", "Failed", "Skipped"):
                step.events.append(_event(item.key, new))
            step.status = new

    job = item.job
    if job is not None and job.state != "Running" and not job.recorded:
        result = decode_result(job.message)
        if job.state == "Failed" and result.failure is None:
            result = RebuildResult(failure=f"Job {job.name} failed")
        start = old.start_time if old is not None and old.job == job.name else job.created
        update(status_from_result(result, "Job", start=start, end=rfc3339(now), pod=job.pod, job=job.name))
        step.record_job = job.name
    if item.init is not None:
        new = _from_init(item.init, step.status)
        if new is not None:
            update(new)
    if not item.requested:
        return step
    spec = item.spec
    if spec is None or item.unusable is not None:
        step.clear_request = True
        step.events.append(
            Event(
                item.key, "Warning", "RebuildRefused", item.unusable or "the TieredBroker's spec is invalid"
            )
        )
        return step
    if job is not None and job.state == "Running":
        step.clear_request = True  # the request is being served
        return step
    if spec.paused:
        return step  # the request waits until the broker is unpaused
    if item.users:
        message = (
            f"waiting: pod(s) {', '.join(item.users)} use the volume(s) {', '.join(spec.claims())} "
            "read-write; stop the broker (scale it down or pause its operator and delete the pod) to rebuild"
        )
        if step.status is None or step.status.phase != "Blocked" or step.status.message != message:
            step.events.append(Event(item.key, "Warning", "RebuildBlocked", message))
            step.status = RebuildStatus(
                phase="Blocked", source="Job", start_time=rfc3339(now), message=_cut(message, 1000)
            )
        return step
    step.start_job = True
    step.clear_request = True
    step.status = RebuildStatus(
        phase="Running",
        source="Job",
        start_time=rfc3339(now),
        message="a rebuild Job restores " + ", ".join(f"{d.path} on {d.claim_name}" for d in spec.log_dirs()),
    )
    return step


def health(status: RebuildStatus | None) -> Health | None:
    """What the rebuild adds to the broker's conditions: in progress, waiting, or failed."""
    if status is None:
        return None
    if status.phase == "Running":
        return Health(False, "Rebuilding", status.message, reconciling=True)
    if status.phase == "Blocked":
        return Health(False, "RebuildBlocked", status.message, reconciling=True)
    if status.phase == "Failed":
        return Health(False, "RebuildFailed", f"rebuild failed: {status.message}", stalled=True)
    return None


def with_rebuild(
    status: TieredBrokerStatus,
    rebuild: RebuildStatus | None,
    previous: Sequence[Condition],
    generation: int | None,
    now: datetime.datetime,
) -> TieredBrokerStatus:
    """The planner's status of a broker with its rebuild: a rebuild in progress, blocked or failed speaks
    for the conditions, unless the planner already found the broker unusable. ``previous``: the
    conditions before this round (their transition times carry over)."""
    updated = status.model_copy(update={"rebuild": rebuild})
    verdict = health(rebuild)
    ready = any(c.type == READY and c.status == "True" for c in status.conditions)
    if verdict is None or not (ready or verdict.stalled):
        return updated
    conditions = conditions_for(verdict, generation, previous, now)
    # Conditions of other parts (FetcherChangePending) stay as the round set them.
    conditions += [c for c in status.conditions if c.type not in (READY, RECONCILING, STALLED)]
    return updated.model_copy(update={"message": verdict.message, "conditions": conditions})


def pods_using_claim(
    pods: Sequence[Mapping[str, Any]], claim: str, *, ignore: frozenset[str] = frozenset()
) -> tuple[str, ...]:
    """Names of the pods that may write to ``claim``: not finished, mounting it without readOnly."""
    users = []
    for pod in pods:
        name = str(pod["metadata"]["name"])
        if name in ignore or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            source = volume.get("persistentVolumeClaim")
            if source and source.get("claimName") == claim and not source.get("readOnly"):
                mounts = [
                    m
                    for c in [*pod["spec"].get("initContainers", []), *pod["spec"].get("containers", [])]
                    for m in c.get("volumeMounts", [])
                    if m.get("name") == volume.get("name")
                ]
                if not mounts or any(not m.get("readOnly") for m in mounts):
                    users.append(name)
                    break
    return tuple(sorted(users))


def init_container_view(pod: Mapping[str, Any]) -> InitContainerView | None:
    """The rebuild init container's state in a pod's status (None when the pod has none)."""
    name = str(pod["metadata"]["name"])
    for entry in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if entry.get("name") != INIT_CONTAINER:
            continue
        state = entry.get("state") or {}
        if "running" in state:
            return InitContainerView(name, running_since=state["running"].get("startedAt"))
        done = state.get("terminated") or (entry.get("lastState") or {}).get("terminated")
        if not done:
            return InitContainerView(name)
        return InitContainerView(
            name,
            started=done.get("startedAt"),
            finished=done.get("finishedAt"),
            exit_code=int(done.get("exitCode", 1)),
            message=done.get("message"),
        )
    return None
