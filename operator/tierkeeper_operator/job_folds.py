"""How a finished Job of the topic rounds is folded into statuses: its termination message decoded
(:mod:`storage_core.reconcile.results`) and handed to the planner's fold for its kind
(:mod:`storage_core.reconcile.round`). Each function is the ``fold`` of a row of
:data:`.job_kinds.KINDS`; one that finds more to say than how the run went (a Warning the result calls
for) returns it as Events, which :mod:`.job_results` posts.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storage_core.reconcile.planner import Event
from storage_core.reconcile.results import decode_cleanup, decode_copy, decode_table
from storage_core.reconcile.round import (
    CleanupOutcome,
    CopyOutcome,
    Statuses,
    TableOutcome,
    fold_cleanup,
    fold_copy,
    fold_table,
)
from tierkeeper_operator.jobs import job_state, work_of


@dataclass(frozen=True)
class Finished:
    """A finished Job of the topic rounds as its row's ``fold`` gets it: the Job, its termination message
    ("" when no pod left one), the TieredBroker it copied from (if any) and when it was folded."""

    job: Mapping[str, Any]
    message: str
    broker_key: str | None
    now: datetime.datetime

    @property
    def name(self) -> str:
        return str(self.job["metadata"]["name"])

    @property
    def state(self) -> str:
        """``Succeeded`` or ``Failed``."""
        return job_state(self.job)

    @property
    def work(self) -> list[tuple[str, str]]:
        """(TieredTopic key, topic) it worked for."""
        return [(key, topic) for key, topic, _ in work_of(self.job)]

    def failure(self, problem: str | None) -> str | None:
        """A readable result speaks for itself (per-partition errors); without one the whole run failed."""
        return None if problem is None else f"Job {self.name} {self.state.lower()}: {problem}"


Fold = Callable[[Finished, Statuses], Sequence[Event]]
"""Decode a finished Job's result and fold it into the statuses; returns the Events the result calls for
beyond the row's own ``<event>Succeeded``/``<event>Failed`` (posted on the objects their keys name)."""


def fold_copy_result(done: Finished, statuses: Statuses) -> list[Event]:
    by_topic, problem = decode_copy(done.message)
    rows = [row for rows in by_topic.values() for row in rows]
    fold_copy(
        statuses, done.work, done.broker_key, CopyOutcome(rows, done.failure(problem), done.name), done.now
    )
    return []


def fold_cleanup_result(done: Finished, statuses: Statuses) -> list[Event]:
    report, problem = decode_cleanup(done.message)
    outcome = CleanupOutcome(report, done.failure(problem), done.name)
    fold_cleanup(statuses, [key for key, _ in done.work], outcome, done.now)
    return []


def fold_table_result(action_kind: str) -> Fold:
    def fold(done: Finished, statuses: Statuses) -> list[Event]:
        report, problem = decode_table(action_kind, done.message)
        for key, _ in done.work:
            outcome = TableOutcome(report, done.failure(problem), done.name)
            fold_table(statuses, key, action_kind, outcome, done.now)
        return []

    return fold
