"""What a round does, chosen from a seed: the faults, each at a step of the round (not at a moment: a step
is a fixed amount of acknowledged work, so the same seed gives the same history on any machine)."""

from __future__ import annotations

import random
from dataclasses import dataclass

BROKER_KILL = "broker_kill"
"""SIGKILL one broker before the step's reconcile round; it restarts after that round."""
LEADER_CHANGE = "leader_change"
"""Stop one broker gracefully (its partitions' leadership moves) and start it again after the round."""
RECONCILER_KILL = "reconciler_kill"
"""The step's reconcile round is SIGKILLed at a named fault point of the copy or the cleanup."""
S3_ERRORS = "s3_errors"
"""S3 answers 500 / SlowDown / resets to a share of the round's requests (within the retry bound)."""
S3_OUTAGE = "s3_outage"
"""Every S3 request of the round fails: longer than any retry bound, the round must give up cleanly."""
GATEWAY_RESTART = "gateway_restart"
"""The gateway is SIGKILLed and started again before the step's checks read through it."""

KINDS = (BROKER_KILL, LEADER_CHANGE, RECONCILER_KILL, S3_ERRORS, S3_OUTAGE, GATEWAY_RESTART)

TOPIC_RECREATE = "topic_recreate"
"""The plain topic is deleted and created again under the same name before the step's producing (a step
after the first, so the deleted incarnation has a tier of its own)."""
BROKER_WIPE = "broker_wipe"
"""SIGKILL one broker and remove its log dir (meta.properties stays, as on a new disk formatted for it);
after the step's reconcile ``tierkeeper rebuild --if-empty`` restores it, as the rebuild init container
does, and the broker starts and must rejoin every ISR."""

CLOCK_JUMP = "clock_jump"
"""The producers' clock, until this step two remote-retention windows behind, jumps to the true time: the
retention topic's records stamped before it are expired at once, those after are not."""

EXTRA_KINDS = (TOPIC_RECREATE, BROKER_WIPE, CLOCK_JUMP)
"""Drawn per round apart from ``KINDS``, each with ``EXTRA_RATE``, from a random stream of their own: adding
them left the history every earlier seed drew unchanged (the recorded results stay reproducible)."""
EXTRA_RATE = 0.35

OPERATOR_KILL = "operator_kill"
"""Operator mode only: every pod of the operator's Deployment (both replicas) deleted with no grace period
(SIGKILL) at a moment of the step the seed picks (``OPERATOR_MOMENTS``); the Deployment recreates them and
the new replicas must take over the running Jobs, results and finalizers."""
TIERED_TOPIC_DELETE = "tiered_topic_delete"
"""Operator mode only: the round's fourth topic, whose TieredTopic says ``deletionPolicy: Delete``, has its
TieredTopic deleted at a step after the first (it has a tier then), after the step's producing, at once or
while a copy Job of it runs (``DELETE_MOMENTS``); the delete Job must remove its whole tier."""
OPERATOR_KINDS = (OPERATOR_KILL, TIERED_TOPIC_DELETE)
"""Drawn only in operator mode, each with ``OPERATOR_RATE``, from a random stream of their own (the
standalone history of every seed stays what it was)."""
OPERATOR_RATE = 0.5
OPERATOR_MOMENTS = ("step_start", "copy_job", "cleanup_job")
"""When in a step the operator is killed: once its replicas run (before or between rounds), or once the
step's first copy (cleanup) Job exists, so it dies while the Job runs or right after: events, not times."""
DELETE_MOMENTS = ("idle", "copy_job")
"""When the TieredTopic is deleted: at once, or once a copy Job whose work holds the topic is running."""

RECONCILER_POINTS = (
    "copy.segment.started",
    "copy.log.stored",
    "copy.segment.finished",
    "cleanup.trim.recorded",
    "store.request",
)
"""Points a copy or a local trim passes (storage_core/faults.py); remote retention is infinite in the
campaign's topics, so the remote deletion points are never reached and are not drawn."""


@dataclass(frozen=True, order=True)
class Fault:
    step: int
    kind: str
    target: int | None = None
    """The broker of a broker fault."""
    point: str | None = None
    """The fault point of a reconciler kill."""
    nth: int = 1
    """Which pass of ``point`` is killed."""

    def describe(self) -> str:
        broker = f" broker {self.target}"
        where = {BROKER_KILL: broker, LEADER_CHANGE: broker, BROKER_WIPE: broker}.get(self.kind, "")
        if self.kind == RECONCILER_KILL:
            where = f" at {self.point}:{self.nth}"
        elif self.kind in OPERATOR_KINDS:
            where = f" at {self.point}"
        return f"step {self.step}: {self.kind}{where}"


@dataclass(frozen=True)
class RoundPlan:
    seed: int
    round_no: int
    steps: int
    faults: tuple[Fault, ...]

    def at(self, step: int) -> tuple[Fault, ...]:
        return tuple(f for f in self.faults if f.step == step)

    def history(self) -> str:
        return "; ".join(f.describe() for f in self.faults) or "no faults"

    def deleted_topic(self) -> Fault | None:
        """The TieredTopic delete of the round, if drawn (operator mode)."""
        return next((f for f in self.faults if f.kind == TIERED_TOPIC_DELETE), None)

    def recreated_last(self) -> bool:
        """The plain topic recreated at the round's last step: its live incarnation then holds one step of
        records (about 94 KB per partition), inside the 96 KiB local window, so no trim is due before the
        checks (found on seed 7, round 1, two steps)."""
        return any(f.kind == TOPIC_RECREATE and f.step == self.steps - 1 for f in self.faults)


def plan_round(
    seed: int,
    round_no: int,
    *,
    steps: int,
    brokers: tuple[int, ...],
    faults: int,
    kinds: tuple[str, ...] = KINDS,
    extras: tuple[str, ...] = EXTRA_KINDS,
    extra_rate: float = EXTRA_RATE,
    operator_kinds: tuple[str, ...] = (),
    operator_rate: float = OPERATOR_RATE,
) -> RoundPlan:
    """``faults`` faults drawn from ``kinds``, at most one broker fault per step (RF 3 with
    min.insync.replicas 2 keeps acks=all producers going with one broker down, not two) and one S3 fault
    per step (the proxy follows one plan at a time). ``operator_kinds``: those of ``OPERATOR_KINDS`` to
    draw too (operator mode)."""
    if not kinds or steps < 1 or faults < 0:
        raise ValueError("a round needs steps >= 1, faults >= 0 and at least one kind")
    unknown = (
        (set(kinds) - set(KINDS))
        | (set(extras) - set(EXTRA_KINDS))
        | (set(operator_kinds) - set(OPERATOR_KINDS))
    )
    if unknown:
        known = ", ".join(KINDS + EXTRA_KINDS + OPERATOR_KINDS)
        raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {known}")
    rng = random.Random(f"{seed}:{round_no}")
    chosen: list[Fault] = []
    broker_steps: set[int] = set()
    s3_steps: set[int] = set()
    for _ in range(faults):
        kind = rng.choice(kinds)
        step = rng.randrange(steps)
        if kind in (BROKER_KILL, LEADER_CHANGE):
            if step in broker_steps:
                continue
            broker_steps.add(step)
            chosen.append(Fault(step, kind, target=rng.choice(brokers)))
        elif kind == RECONCILER_KILL:
            chosen.append(Fault(step, kind, point=rng.choice(RECONCILER_POINTS), nth=rng.randint(1, 3)))
        elif kind in (S3_ERRORS, S3_OUTAGE):
            if step in s3_steps:
                continue
            s3_steps.add(step)
            chosen.append(Fault(step, kind))
        else:
            chosen.append(Fault(step, kind))
    more = random.Random(f"{seed}:{round_no}:extras")
    for kind in extras:
        drawn, step, target = more.random() < extra_rate, more.randrange(steps), more.choice(brokers)
        if not drawn:
            continue
        if kind == CLOCK_JUMP:
            if steps >= 2:  # records on both sides of the jump
                chosen.append(Fault(max(step, 1), kind))
            continue
        # A topic is created with RF 3 only while every broker runs: no broker fault in its step.
        first = 1 if kind == TOPIC_RECREATE else 0
        free = [s for s in range(first, steps) if s not in broker_steps]
        if not free:
            continue
        step = free[step % len(free)]
        broker_steps.add(step)
        chosen.append(Fault(step, kind, target=target if kind == BROKER_WIPE else None))
    ours = random.Random(f"{seed}:{round_no}:operator")
    for kind in OPERATOR_KINDS:
        drawn, step = ours.random() < operator_rate, ours.randrange(steps)
        moment = ours.choice(OPERATOR_MOMENTS if kind == OPERATOR_KILL else DELETE_MOMENTS)
        if not drawn or kind not in operator_kinds:
            continue
        if kind == TIERED_TOPIC_DELETE:
            if steps < 2:  # deleted after a step that tiered it
                continue
            step = max(step, 1)
        chosen.append(Fault(step, kind, point=moment))
    return RoundPlan(seed, round_no, steps, tuple(sorted(set(chosen))))
