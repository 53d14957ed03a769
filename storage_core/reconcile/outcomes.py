"""Fold the machine-readable result of a copy or cleanup run into the status of the resources it touched.

The results are the ``--json`` summaries of ``tierkeeper copy`` and ``tierkeeper cleanup`` (in-process
runs produce the same dictionaries), so the operator reads a Job's outcome from its termination message
and standalone mode from the returned value, through the same functions.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from storage_core.api.status import (
    CopyLag,
    PartitionPosition,
    PartitionTier,
    RemoteSummary,
    RunOutcome,
    TableStatus,
    TieredBrokerStatus,
    TieredTopicStatus,
)
from storage_core.reconcile.conditions import rfc3339
from storage_core.reconcile.text import one_line

MAX_MESSAGE = 300


def _one_line(text: str) -> str:
    return one_line(text, MAX_MESSAGE)


def _failed(previous: RunOutcome | None, now: datetime.datetime, message: str, job: str | None) -> RunOutcome:
    """A failed run, counted after the failures in a row before it."""
    before = previous.failures_in_a_row if previous is not None and previous.result == "Failed" else 0
    return RunOutcome(
        time=rfc3339(now), result="Failed", message=_one_line(message), job=job, failures_in_a_row=before + 1
    )


def _outcome(
    previous: RunOutcome | None, now: datetime.datetime, job: str | None, problem: str | None, done: str
) -> RunOutcome:
    """Failed with ``problem`` as its message; or, with no problem, succeeded: ``done`` says what it did."""
    if problem is not None:
        return _failed(previous, now, problem, job)
    return RunOutcome(time=rfc3339(now), result="Succeeded", message=done, job=job)


def _problem(failure: str | None, errors: Sequence[str]) -> str | None:
    """A run's failure as a whole and its per-partition errors as one message; None when it had neither."""
    if failure is None and not errors:
        return None
    return "; ".join([*filter(None, [failure]), *errors])


def _with_partitions(status: TieredTopicStatus, tiers: Mapping[int, PartitionTier]) -> dict[str, Any]:
    ordered = [tiers[p] for p in sorted(tiers)]
    return {
        "remote": RemoteSummary(
            segments=sum(t.segments for t in ordered), bytes=sum(t.bytes for t in ordered), partitions=ordered
        ),
        "copy_lag": CopyLag(
            segments=sum(t.lag_segments for t in ordered), bytes=sum(t.lag_bytes for t in ordered)
        ),
    }


def _current_tiers(status: TieredTopicStatus, topic_id: str | None) -> dict[int, PartitionTier]:
    if status.remote is None or (topic_id is not None and status.topic_id not in (None, topic_id)):
        return {}  # a recreated topic starts a new remote tier
    return {t.partition: t for t in status.remote.partitions}


def topic_after_copy(
    status: TieredTopicStatus,
    partitions: Sequence[Mapping[str, Any]],
    now: datetime.datetime,
    job: str | None = None,
    failure: str | None = None,
) -> TieredTopicStatus:
    """``partitions``: this topic's entries of a copy summary's ``partitions``. ``failure``: the run as a
    whole failed (a Job without a result, a crash) and ``partitions`` may be empty."""
    topic_id = next((p.get("topic_id") for p in partitions if p.get("topic_id")), None)
    tiers = _current_tiers(status, topic_id)
    errors = [f"partition {p['partition']}: {p['error']}" for p in partitions if p.get("error")]
    for p in partitions:
        if p.get("error"):
            continue
        tiers[int(p["partition"])] = PartitionTier(
            partition=int(p["partition"]),
            start_offset=p.get("remote_start_offset"),
            end_offset=p.get("remote_end_offset"),
            segments=int(p.get("remote_segments", 0)),
            bytes=int(p.get("remote_bytes", 0)),
            lag_segments=int(p.get("untiered_segments", 0)),
            lag_bytes=int(p.get("untiered_bytes", 0)),
        )
    copied = sum(int(p.get("copied_segments", 0)) for p in partitions)
    copied_bytes = sum(int(p.get("copied_bytes", 0)) for p in partitions)
    done = f"copied {copied} segments ({copied_bytes} bytes) from {len(partitions)} partitions"
    outcome = _outcome(status.last_copy, now, job, _problem(failure, errors), done)
    update: dict[str, Any] = {"last_copy": outcome, **_with_partitions(status, tiers)}
    if topic_id is not None:
        update["topic_id"] = topic_id
    return status.model_copy(update=update)


def broker_after_copy(
    status: TieredBrokerStatus,
    partitions: Sequence[Mapping[str, Any]],
    now: datetime.datetime,
    job: str | None = None,
    failure: str | None = None,
) -> TieredBrokerStatus:
    failed = [p for p in partitions if p.get("error")]
    problem = None
    if failure is not None or failed:
        problem = failure or f"{len(failed)} of {len(partitions)} partitions failed"
    copied = sum(int(p.get("copied_segments", 0)) for p in partitions)
    done = f"copied {copied} segments from {len(partitions)} partitions"
    outcome = _outcome(status.last_copy, now, job, problem, done)
    return status.model_copy(update={"last_copy": outcome})


def topic_after_cleanup(
    status: TieredTopicStatus,
    report: Mapping[str, Any] | None,
    now: datetime.datetime,
    job: str | None = None,
    failure: str | None = None,
) -> TieredTopicStatus:
    """``report``: a cleanup summary restricted to this topic (``run_cleanup``'s dictionary)."""
    report = report or {}
    errors = [str(e) for e in report.get("errors", [])]
    tiers = _current_tiers(status, None)
    trimmed = 0
    for p in report.get("partitions", []):
        old = tiers.get(int(p["partition"]))
        if old is not None and not p.get("dry_run"):
            deleted = len(p.get("deleted", []))
            tiers[old.partition] = old.model_copy(
                update={
                    "start_offset": p.get("remote_start_offset", old.start_offset),
                    "segments": max(0, old.segments - deleted),
                    "bytes": max(0, old.bytes - int(p.get("bytes_deleted", 0))),
                }
            )
        if p.get("local_trim"):
            trimmed += 1
    deleted_bytes = int(report.get("bytes_deleted", 0))
    done = f"deleted {deleted_bytes} remote bytes; local data trimmed on {trimmed} partitions"
    outcome = _outcome(status.last_cleanup, now, job, _problem(failure, errors), done)
    update: dict[str, Any] = {"last_cleanup": outcome}
    if status.remote is not None:
        update.update(_with_partitions(status, tiers))
    return status.model_copy(update=update)


def _table_of(status: TieredTopicStatus) -> TableStatus:
    return status.table if status.table is not None else TableStatus()


def _exported(table: TableStatus, report: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``tierkeeper export --format iceberg --json``'s summary: the message and the table's new fields."""
    update: dict[str, Any] = {
        "name": report.get("table", table.name),
        "location": report.get("location", table.location),
        "snapshot_id": report.get("snapshot_id"),
        "rows": report.get("rows", table.rows),
    }
    offsets = report.get("next_offsets")
    if offsets is not None:  # absent when a large result was cut to fit a termination message
        update["exported"] = [
            PartitionPosition(partition=int(p), next_offset=int(o))
            for p, o in sorted(offsets.items(), key=lambda item: int(item[0]))
        ]
    message = f"exported {int(report.get('records', 0))} records in {int(report.get('files', 0))} files"
    return message, update


def _maintained(table: TableStatus, report: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``tierkeeper table-maintenance --json``'s summary: the message and the table's new fields."""
    message = (
        f"expired {int(report.get('expired_snapshots', 0))} snapshots, deleted "
        f"{int(report.get('orphans_deleted', 0))} orphan files, compacted "
        f"{int(report.get('files_compacted', 0))} files into {int(report.get('files_written', 0))}"
    )
    return message, {
        "snapshot_id": report.get("snapshot_id", table.snapshot_id),
        "rows": report.get("rows", table.rows),
    }


_Summary = Callable[[TableStatus, Mapping[str, Any]], tuple[str, dict[str, Any]]]
_TABLE_RUNS: dict[str, tuple[str, str, _Summary]] = {
    # TableAction.kind: (its run's TableStatus field, the failure of a run that left no result, the summary)
    "export": ("last_export", "the export left no result", _exported),
    "maintain": ("last_maintenance", "table maintenance left no result", _maintained),
}


def topic_after_table_run(
    status: TieredTopicStatus,
    kind: str,
    report: Mapping[str, Any] | None,
    now: datetime.datetime,
    job: str | None = None,
    failure: str | None = None,
) -> TieredTopicStatus:
    """``status`` after an export or a table maintenance run (``kind`` "export" or "maintain");
    ``report`` is the run's ``--json`` summary (or a Job's result decoded)."""
    run, no_result, summary = _TABLE_RUNS[kind]
    table = _table_of(status)
    if failure is not None or report is None:
        outcome = _failed(getattr(table, run), now, failure or no_result, job)
        return status.model_copy(update={"table": table.model_copy(update={run: outcome})})
    message, update = summary(table, report)
    update[run] = RunOutcome(time=rfc3339(now), result="Succeeded", message=message, job=job)
    return status.model_copy(update={"table": table.model_copy(update=update)})
