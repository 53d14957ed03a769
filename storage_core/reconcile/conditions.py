"""The kstatus conditions of a resource, from one verdict: Ready always, Reconciling and Stalled only while
True (kstatus reads Reconciling=True as InProgress and Stalled=True as Failed, and anything else with a
current observedGeneration as Current). Transition times move only when a condition's status flips.

Stalled means what kstatus means by it: no progress without a person (an invalid spec, a refused topic, a
client config that cannot be read, a one-shot action that failed) or a failure that keeps repeating
(:data:`FAILURES_BEFORE_STALLED` runs in a row). Trouble the operator retries by itself (Kafka
unreachable, a copy or cleanup Job that failed once or twice) is Ready=False with Reconciling=True and
the same reason and message: Flux keeps waiting, Argo CD shows Progressing, nobody is paged as failed.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from storage_core.api.status import READY, RECONCILING, STALLED, Condition, RunOutcome

FAILURES_BEFORE_STALLED = 3
"""Copy or cleanup runs of a resource that must fail in a row before it is Stalled (docs/gitops.md): one
or two failures are retried by the next run as a matter of course (a Kafka leader change, a node drained
under a Job, an object store's bad minute); a third in a row is no longer passing trouble."""


@dataclass(frozen=True)
class Health:
    """What is true of the resource now. At most one of ``reconciling`` and ``stalled`` is set."""

    ready: bool
    reason: str
    """CamelCase reason of the Ready condition (and of Reconciling/Stalled when set)."""
    message: str
    reconciling: bool = False
    stalled: bool = False
    warning: bool = False
    """Worth a Warning Event when the resource enters it, though retried (Kafka unreachable). Stalled always
    is; a failed Job already has its own Event."""


def run_failure(reason: str, what: str, last: RunOutcome) -> Health:
    """The health of a resource whose last ``what`` run (copy, cleanup) failed: retried (Reconciling)
    until :data:`FAILURES_BEFORE_STALLED` failed in a row, Stalled from then on."""
    count = last.failures_in_a_row or 1  # a status written before the count existed: one failure
    if count >= FAILURES_BEFORE_STALLED:
        message = f"last {what} failed ({count} in a row): {last.message}"
        return Health(False, reason, message, stalled=True)
    message = f"last {what} failed ({count} in a row, retrying): {last.message}"
    return Health(False, reason, message, reconciling=True)


def rfc3339(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_rfc3339(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def condition(
    kind: str,
    status: Literal["True", "False"],
    reason: str,
    message: str,
    generation: int | None,
    previous: Sequence[Condition],
    now: datetime.datetime,
) -> Condition:
    """One condition of type ``kind``; its transition time moves only when its status flips."""
    transition = rfc3339(now)
    for old in previous:
        if old.type == kind and old.status == status:
            transition = old.last_transition_time
    return Condition(
        type=kind,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=transition,
        observed_generation=generation,
    )


def _condition(
    kind: str,
    status: Literal["True", "False"],
    health: Health,
    generation: int | None,
    previous: Sequence[Condition],
    now: datetime.datetime,
) -> Condition:
    return condition(kind, status, health.reason, health.message, generation, previous, now)


def conditions_for(
    health: Health, generation: int | None, previous: Sequence[Condition], now: datetime.datetime
) -> list[Condition]:
    out = [_condition(READY, "True" if health.ready else "False", health, generation, previous, now)]
    if health.reconciling:
        out.append(_condition(RECONCILING, "True", health, generation, previous, now))
    if health.stalled:
        out.append(_condition(STALLED, "True", health, generation, previous, now))
    return out


def recorded_conditions(status: Mapping[str, Any] | None) -> list[Condition]:
    """The conditions an object's ``status`` holds now, skipping any that do not parse: a malformed
    condition written by someone else must not wedge the handler or the round that rewrites them."""
    out = []
    for raw in (status or {}).get("conditions") or []:
        try:
            out.append(Condition.model_validate(raw))
        except ValueError:  # pydantic's ValidationError is one
            continue
    return out
