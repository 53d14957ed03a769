"""When a topic's Iceberg table (``spec.table``) is exported to or maintained: pure, from the spec, the
topic's status (what the tier holds, what the table holds, how the last runs ended) and the time.

Rules:
- One table run per topic at a time (an export, or a maintenance run): two exports of one table would
  only race for the commit, and orphan removal must not run beside an export writing files.
- Export, trigger AfterCopy: when the tier holds offsets the table lacks (``lag``) and a copy round
  ended since the last export began to matter: no export yet, the last one succeeded, or a copy ended
  after a failed one (so a broken catalog is retried once per copy round, not every round).
- Export, trigger Interval: when the table lacks offsets and the interval has passed since the last export.
- Maintenance: on its interval, once an export has committed, when no export is due (export first).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from storage_core.api.resources import TableSpec
from storage_core.api.status import RemoteSummary, RunOutcome, TableStatus, TieredTopicStatus
from storage_core.reconcile.conditions import parse_rfc3339
from storage_core.reconcile.schedule import interval_due, interval_due_next


@dataclass(frozen=True)
class TableAction:
    """Export to, or maintain, one TieredTopic's table."""

    kind: Literal["export", "maintain"]
    cluster: str
    topic_key: str
    topic: str
    table: TableSpec


@dataclass(frozen=True)
class TableDecision:
    action: Literal["export", "maintain"] | None
    due_at: datetime.datetime | None = None
    """When nothing is due now: when something falls due (for the round runner's next wake-up)."""


def tier_ends(remote: RemoteSummary | None) -> dict[int, int]:
    """Per partition, the offset after the last one the tier holds."""
    if remote is None:
        return {}
    return {p.partition: p.end_offset + 1 for p in remote.partitions if p.end_offset is not None}


def exported(table: TableStatus | None) -> dict[int, int]:
    return {p.partition: p.next_offset for p in table.exported} if table is not None else {}


def table_lag(remote: RemoteSummary | None, table: TableStatus | None) -> int:
    """Offsets the tier holds that the table lacks, summed over partitions."""
    done = exported(table)
    starts = {p.partition: p.start_offset or 0 for p in remote.partitions} if remote is not None else {}
    return sum(max(0, end - done.get(p, starts.get(p, 0))) for p, end in tier_ends(remote).items())


def _after(a: RunOutcome | None, b: RunOutcome | None) -> bool:
    """Whether run ``a`` ended after run ``b`` (True when ``b`` never ran)."""
    if b is None:
        return True
    return a is not None and parse_rfc3339(a.time) > parse_rfc3339(b.time)


def decide_table(
    spec: TableSpec, status: TieredTopicStatus, running: bool, now: datetime.datetime
) -> TableDecision:
    """The table run due for one tierable, unpaused topic whose spec has a ``table``."""
    if running:
        return TableDecision(None)
    table = status.table
    last_export = table.last_export if table is not None else None
    behind = table_lag(status.remote, table) > 0
    if spec.trigger == "AfterCopy":
        if behind and (
            last_export is None or last_export.result == "Succeeded" or _after(status.last_copy, last_export)
        ):
            return TableDecision("export")
        export_next = None
    else:
        if behind and interval_due(spec.interval_seconds, last_export, now):
            return TableDecision("export")
        export_next = interval_due_next(spec.interval_seconds, last_export) if behind else None
    maintenance = spec.maintenance
    committed = table is not None and table.snapshot_id is not None
    if not maintenance.enabled or not committed:
        return TableDecision(None, export_next)
    last = table.last_maintenance if table is not None else None
    if interval_due(maintenance.interval_seconds, last, now):
        return TableDecision("maintain")
    after = interval_due_next(maintenance.interval_seconds, last)
    soonest = min((t for t in (export_next, after) if t is not None), default=None)
    return TableDecision(None, soonest)


def with_lag(status: TieredTopicStatus) -> TieredTopicStatus:
    """``status`` with ``table.lagOffsets`` recomputed from what the tier and the table hold now."""
    if status.table is None:
        return status
    lag = table_lag(status.remote, status.table) if status.remote is not None else None
    return status.model_copy(update={"table": status.table.model_copy(update={"lag_offsets": lag})})


def positions(next_offsets: Mapping[int, int]) -> list[dict[str, int]]:
    return [{"partition": p, "next_offset": o} for p, o in sorted(next_offsets.items())]
