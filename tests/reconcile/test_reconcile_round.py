"""One round, two executors (storage_core.reconcile.round.execute): an executor that returns outcomes
(in process) gets the cleanup the copies make due in the same round, and ends the round with the folded
statuses; one that only starts work (Kubernetes Jobs) gets the first plan's actions, nothing is folded,
and the round ends with the first plan. Executors here are plain objects, as httpx's mock transport is a
plain function; the planner and the folding are the real ones."""

from __future__ import annotations

import datetime

from reconcile.test_reconcile_planner import BROKERS, CLUSTERS, topic

from storage_core.reconcile.observed import RunningWork
from storage_core.reconcile.planner import CleanupAction, CopyAction
from storage_core.reconcile.round import CleanupOutcome, CopyOutcome, Statuses, execute

T0 = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)


class InProcess:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def copy(self, action: CopyAction) -> CopyOutcome:
        self.calls.append(f"copy {action.broker_id}")
        rows = [
            {
                "topic": w.topic,
                "topic_id": "id-orders",
                "partition": p,
                "copied_segments": 1,
                "remote_end_offset": 9,
            }
            for w in action.work
            for p in w.partitions
        ]
        return CopyOutcome(rows)

    def cleanup(self, action: CleanupAction) -> CleanupOutcome:
        self.calls.append(f"cleanup {action.topic}")
        return CleanupOutcome({"partitions": [], "errors": [], "bytes_deleted": 0})


class Jobs:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def copy(self, action: CopyAction) -> None:
        self.calls.append(f"copy {action.broker_id}")

    def cleanup(self, action: CleanupAction) -> None:
        self.calls.append(f"cleanup {action.topic}")


def run(executor: InProcess | Jobs) -> Statuses:
    topics = [topic("orders", leaders=(1, 2))]
    statuses = Statuses({t.key: t.status for t in topics}, {b.key: b.status for b in BROKERS})
    execute(CLUSTERS, topics, BROKERS, RunningWork(), statuses, executor, lambda: T0, statuses.keep)
    return statuses


def test_in_process_the_cleanup_follows_the_copies_in_the_same_round() -> None:
    executor = InProcess()
    statuses = run(executor)
    assert executor.calls == ["copy 1", "copy 2", "cleanup orders"]
    orders = statuses.topics["ns/orders"]
    assert orders.last_copy is not None and orders.last_copy.result == "Succeeded"
    assert orders.last_cleanup is not None and orders.last_cleanup.result == "Succeeded"
    assert {c.type: c.status for c in orders.conditions} == {"Ready": "True"}


def test_with_jobs_the_round_starts_the_copies_and_ends_with_the_first_plan() -> None:
    executor = Jobs()
    statuses = run(executor)
    assert executor.calls == ["copy 1", "copy 2"]  # the cleanup comes once a copy result is recorded
    orders = statuses.topics["ns/orders"]
    assert orders.last_copy is None and orders.last_cleanup is None
    assert {c.type: c.reason for c in orders.conditions}["Ready"] == "FirstCopyPending"
