"""What holds a topic's local trim: the cleanup report's per-partition ``trim_hold`` folded into
``status.trimHold``, the ``TrimHeld`` condition and its Warning.

A cleanup report (``run_cleanup``'s ``partitions[]``) says per partition where the local window alone
would trim (``window_to``), where the trim went (``to``), which direct readers held it (``held_by``), which
ones the bound stopped waiting for (``overridden``, with the offsets they miss), or that group information
was unavailable (``unknown``: the trim was kept). :func:`summarize` turns that into the status; a Job's
termination message carries the summary (:mod:`storage_core.reconcile.results`), so both executors fold
the same thing.

The condition (``TrimHeld``) is not one of kstatus's: a held trim is the hold doing its job, not trouble,
so Ready is left alone. Its reason says what is going on, most urgent first: ``TrimHoldUnknown`` (the trim
was kept for want of the groups' offsets), ``TrimHoldExceeded`` (a bound let the trim pass a group: a
Warning names the group, the partition and the offsets it misses), ``TrimHeld``; with none of these the
condition is absent.

Pure: no I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from storage_core.api.status import Condition
from storage_core.api.trim_hold_status import (
    MAX_GROUPS,
    MAX_PARTITIONS,
    TRIM_HELD,
    HeldBy,
    MissedOffsets,
    PartitionTrimHold,
    TrimHoldStatus,
)
from storage_core.reconcile.conditions import condition, rfc3339
from storage_core.reconcile.text import one_line

MAX_CONDITION_MESSAGE = 600
UNKNOWN = "TrimHoldUnknown"
EXCEEDED = "TrimHoldExceeded"
HELD = "TrimHeld"
NOT_HELD = "NotHeld"
WARNING_REASONS = (UNKNOWN, EXCEEDED)
"""Condition reasons worth a Warning Event each time their message changes."""


def _held_back(p: PartitionTrimHold) -> int:
    """Offsets the hold keeps on the brokers beyond the window (the longest hold of the partition)."""
    if p.window_to is None or not p.held_by:
        return 0
    return max(0, p.window_to - min(h.offset for h in p.held_by))


def _partition(partition: int, hold: Mapping[str, Any]) -> PartitionTrimHold | None:
    held = sorted(hold.get("held_by") or [], key=lambda h: (int(h["offset"]), str(h["group"])))
    over = sorted(hold.get("overridden") or [], key=lambda o: (int(o["offset"]), str(o["group"])))
    if not held and not over:
        return None
    more = max(0, len(held) - MAX_GROUPS) + max(0, len(over) - MAX_GROUPS)
    return PartitionTrimHold(
        partition=partition,
        window_to=hold.get("window_to"),
        trimmed_to=hold.get("to"),
        held_by=[HeldBy(group=str(h["group"]), offset=int(h["offset"])) for h in held[:MAX_GROUPS]],
        overridden=[
            MissedOffsets(group=str(o["group"]), offset=int(o["offset"]), to=int(o["to"]), reason=o["reason"])
            for o in over[:MAX_GROUPS]
        ],
        more_groups=more,
    )


def summarize(partitions: Sequence[Mapping[str, Any]]) -> TrimHoldStatus | None:
    """``status.trimHold`` (without its time) from a cleanup report's partitions of one topic; None when
    no partition reported a hold (trimHold disabled, or nothing was judged)."""
    reported = [p for p in partitions if isinstance(p.get("trim_hold"), Mapping) and not p.get("dry_run")]
    if not reported:
        return None
    unknown = next((str(p["trim_hold"]["unknown"]) for p in reported if "unknown" in p["trim_hold"]), None)
    entries = [
        entry
        for p in reported
        if "unknown" not in p["trim_hold"]
        for entry in [_partition(int(p["partition"]), p["trim_hold"])]
        if entry is not None
    ]
    # Listed: bounds overridden first (someone lost records), then the holds that keep the most.
    ranked = sorted(entries, key=lambda e: (not e.overridden, -_held_back(e), e.partition))
    listed = sorted(ranked[:MAX_PARTITIONS], key=lambda e: e.partition)
    return TrimHoldStatus(
        held_partitions=sum(1 for e in entries if e.held_by),
        overridden_partitions=sum(1 for e in entries if e.overridden),
        partitions=listed,
        more_partitions=len(entries) - len(listed),
        unknown=None if unknown is None else one_line(unknown, 300),
    )


SUMMARIES = "trim_hold_summaries"
"""The key of a decoded Job result's summaries (by topic id, "" for none): the Job summarized its report
(:func:`summarize`) before the termination message's size limit could cut it."""


def trim_hold_after_cleanup(
    previous: TrimHoldStatus | None,
    report: Mapping[str, Any] | None,
    topic_id: str | None,
    now: datetime.datetime,
) -> TrimHoldStatus | None:
    """The status's ``trimHold`` after a cleanup: ``report`` is its report (or a Job's result decoded),
    None when the run failed as a whole (the last known hold stays). A report without holds clears it,
    unless the run had errors (its partitions may not have got that far: the last known stays)."""
    if report is None:
        return previous
    summaries: Mapping[str, TrimHoldStatus] | None = report.get(SUMMARIES)
    summary: TrimHoldStatus | None
    if summaries is not None:
        # As fold_cleanup does with rows: partitions without a topic id count for every status, and a
        # status without one yet takes the only incarnation there is.
        summary = summaries.get(topic_id or "", summaries.get(""))
        if summary is None and topic_id is None and len(summaries) == 1:
            summary = next(iter(summaries.values()))
    else:
        summary = summarize(report.get("partitions", []))
    if summary is None:
        return previous if report.get("errors") else None
    return summary.model_copy(update={"checked_at": rfc3339(now)})


def _missed(p: PartitionTrimHold) -> list[str]:
    return [
        f"group {o.group} misses offsets [{o.offset}, {o.to}) of partition {p.partition} ({o.reason})"
        for o in p.overridden
    ]


def _holds(p: PartitionTrimHold) -> str:
    first = p.held_by[0]
    window = f", window to {p.window_to}" if p.window_to is not None else ""
    others = len(p.held_by) - 1 + p.more_groups
    more = f" and {others} more" if others else ""
    return f"partition {p.partition} by group {first.group} at offset {first.offset}{window}{more}"


def verdict(status: TrimHoldStatus) -> tuple[Literal["True", "False"], str, str]:
    """The TrimHeld condition's status, reason and message for ``status.trimHold``."""
    held = status.held_partitions > 0
    flag: Literal["True", "False"] = "True" if held or status.unknown is not None else "False"
    if status.unknown is not None:
        message = f"the consumer groups' offsets are unknown ({status.unknown}): the trim was kept"
        return flag, UNKNOWN, one_line(message, MAX_CONDITION_MESSAGE)
    if status.overridden_partitions:
        missed = [line for p in status.partitions for line in _missed(p)]
        more = status.overridden_partitions - sum(1 for p in status.partitions if p.overridden)
        tail = f"; and on {more} more partitions" if more > 0 else ""
        message = f"the trim passed the hold's bound: {'; '.join(missed)}{tail}"
        return flag, EXCEEDED, one_line(message, MAX_CONDITION_MESSAGE)
    if held:
        listed = [_holds(p) for p in status.partitions if p.held_by]
        more = status.held_partitions - len(listed)
        tail = f"; and {more} more partitions" if more > 0 else ""
        message = f"direct readers hold the trim on {status.held_partitions} partitions: {'; '.join(listed)}"
        return flag, HELD, one_line(message + tail, MAX_CONDITION_MESSAGE)
    return flag, NOT_HELD, "no direct reader holds the trim"


def trim_condition(
    status: TrimHoldStatus | None,
    generation: int | None,
    previous: Sequence[Condition],
    now: datetime.datetime,
) -> Condition | None:
    """The TrimHeld condition, present only while there is something to say (as Reconciling and Stalled
    are): a hold, a bound overridden, or the groups' offsets unknown; None otherwise (no hold reported, or
    nobody below the window), so the thousands of topics nobody reads directly carry no extra condition.
    Its transition time moves only when its status flips, as for every condition."""
    if status is None:
        return None
    flag, reason, message = verdict(status)
    if reason == NOT_HELD:
        return None
    return condition(TRIM_HELD, flag, reason, message, generation, previous, now)


def warns(previous: Sequence[Condition], held: Condition | None) -> bool:
    """Whether the TrimHeld condition ``held`` deserves a Warning Event: a bound newly overridden (or
    overriding further: the message names the offsets), or the groups' offsets newly unknown. Said once,
    not every round."""
    if held is None or held.reason not in WARNING_REASONS:
        return False
    return not any(
        old.type == TRIM_HELD and old.reason == held.reason and old.message == held.message
        for old in previous
    )
