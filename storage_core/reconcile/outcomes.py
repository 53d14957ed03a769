"""Fold the machine-readable result of a copy or cleanup run into the status of the resources it touched.

The results are the ``--json`` summaries of ``tierkeeper copy`` and ``tierkeeper cleanup`` (in-process
runs produce the same dictionaries), so the operator reads a Job's outcome from its termination message
and standalone mode from the returned value, through the same functions.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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
from storage_core.reconcile.trim_holds import trim_hold_after_cleanup

MAX_MESSAGE = 300


@dataclass(frozen=True)
class RunEnd:
    """How a run ended, as every status records it: when its outcome was folded, the Job that ran it (None
    in process) and the failure of the run as a whole (None when it left a result)."""

    now: datetime.datetime
    job: str | None = None
    failure: str | None = None


def _one_line(text: str) -> str:
    return one_line(text, MAX_MESSAGE)


def _failed(previous: RunOutcome | None, run: RunEnd, message: str) -> RunOutcome:
    """A failed run, counted after the failures in a row before it."""
    before = previous.failures_in_a_row if previous is not None and previous.result == "Failed" else 0
    return RunOutcome(
        time=rfc3339(run.now),
        result="Failed",
        message=_one_line(message),
        job=run.job,
        failures_in_a_row=before + 1,
    )


def _outcome(previous: RunOutcome | None, run: RunEnd, errors: Sequence[str], done: str) -> RunOutcome:
    """Failed when the run failed as a whole or had per-partition ``errors`` (one message of them all);
    otherwise succeeded, ``done`` saying what it did."""
    if run.failure is not None or errors:
        return _failed(previous, run, "; ".join([*filter(None, [run.failure]), *errors]))
    return _succeeded(run, done)


def _succeeded(run: RunEnd, message: str) -> RunOutcome:
    return RunOutcome(time=rfc3339(run.now), result="Succeeded", message=message, job=run.job)


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
    status: TieredTopicStatus, partitions: Sequence[Mapping[str, Any]], run: RunEnd
) -> TieredTopicStatus:
    """``partitions``: this topic's entries of a copy summary's ``partitions``. ``run.failure``: the run as a
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
    outcome = _outcome(status.last_copy, run, errors, done)
    update: dict[str, Any] = {"last_copy": outcome, **_with_partitions(status, tiers)}
    if topic_id is not None:
        update["topic_id"] = topic_id
    return status.model_copy(update=update)


def broker_after_copy(
    status: TieredBrokerStatus, partitions: Sequence[Mapping[str, Any]], run: RunEnd
) -> TieredBrokerStatus:
    failed = sum(1 for p in partitions if p.get("error"))
    errors = [f"{failed} of {len(partitions)} partitions failed"] if failed and run.failure is None else []
    copied = sum(int(p.get("copied_segments", 0)) for p in partitions)
    done = f"copied {copied} segments from {len(partitions)} partitions"
    outcome = _outcome(status.last_copy, run, errors, done)
    return status.model_copy(update={"last_copy": outcome})


def topic_after_cleanup(
    status: TieredTopicStatus, report: Mapping[str, Any] | None, run: RunEnd
) -> TieredTopicStatus:
    """``report``: a cleanup summary restricted to this topic (``run_cleanup``'s dictionary)."""
    held = trim_hold_after_cleanup(
        status.trim_hold, report if run.failure is None else None, status.topic_id, run.now
    )
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
    if held is not None and held.held_partitions:
        done += f", held back by direct readers on {held.held_partitions}"
    outcome = _outcome(status.last_cleanup, run, errors, done)
    update: dict[str, Any] = {"last_cleanup": outcome, "trim_hold": held}
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
    status: TieredTopicStatus, kind: str, report: Mapping[str, Any] | None, run: RunEnd
) -> TieredTopicStatus:
    """``status`` after an export or a table maintenance run (``kind`` "export" or "maintain");
    ``report`` is the run's ``--json`` summary (or a Job's result decoded)."""
    field, no_result, summary = _TABLE_RUNS[kind]
    table = _table_of(status)
    if run.failure is not None or report is None:
        outcome = _failed(getattr(table, field), run, run.failure or no_result)
        return status.model_copy(update={"table": table.model_copy(update={field: outcome})})
    message, update = summary(table, report)
    update[field] = _succeeded(run, message)
    return status.model_copy(update={"table": table.model_copy(update=update)})
