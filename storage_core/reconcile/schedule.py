"""When a topic's next copy or cleanup is due, from its policy and when the last one ended."""

from __future__ import annotations

import datetime
import functools

from storage_core.api.cron import parse_cron
from storage_core.api.resources import CopyPolicy
from storage_core.api.status import RunOutcome
from storage_core.reconcile.conditions import parse_rfc3339


def _last_time(last: RunOutcome | None) -> datetime.datetime | None:
    return parse_rfc3339(last.time) if last is not None else None


def copy_due(policy: CopyPolicy, last: RunOutcome | None, now: datetime.datetime) -> bool:
    """Due when no copy ever ran, when the interval has passed since the last one, or when the cron
    schedule fired since the last one."""
    if policy.schedule is None:
        return interval_due(policy.interval_seconds, last, now)
    since = _last_time(last)
    return since is None or parse_cron(policy.schedule).fired_between(since, now)


def interval_due(interval_seconds: int, last: RunOutcome | None, now: datetime.datetime) -> bool:
    due = interval_due_next(interval_seconds, last)
    return due is None or now >= due


CRON_LOOKAHEAD_MINUTES = 2
"""How far :func:`copy_due_next` looks for a scheduled topic's next firing: a round runner only wants to
know whether work falls due before its next round, and rounds are seconds to minutes apart."""


def copy_due_next(
    policy: CopyPolicy, last: RunOutcome | None, now: datetime.datetime
) -> datetime.datetime | None:
    """When a copy that is not due at ``now`` falls due: the last copy's end plus the interval, or the
    schedule's next firing within :data:`CRON_LOOKAHEAD_MINUTES` (None past that, or when no copy ran:
    then it is due already)."""
    if policy.schedule is None:
        return interval_due_next(policy.interval_seconds, last)
    since = _last_time(last)
    if since is None:
        return None
    schedule = parse_cron(policy.schedule)
    minute = now.replace(second=0, microsecond=0)
    for _ in range(CRON_LOOKAHEAD_MINUTES):
        minute += datetime.timedelta(minutes=1)
        if minute > since and schedule.matches(minute):
            return minute
    return None


def interval_due_next(interval_seconds: int, last: RunOutcome | None) -> datetime.datetime | None:
    """When an interval's run falls due (None when none ran: due already)."""
    since = _last_time(last)
    return since + datetime.timedelta(seconds=interval_seconds) if since is not None else None


_GAP_SCAN_START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
_GAP_SCAN_DAYS = 62


@functools.lru_cache(maxsize=256)  # memoises a pure function of the expression; 10,000 topics share few
def longest_cron_gap_seconds(expression: str) -> int:
    """The longest time between two firings of a cron schedule over two months (at least that long when
    it fires less often): the copy interval the local-trim rule must assume for a scheduled topic."""
    schedule = parse_cron(expression)
    minute, end = _GAP_SCAN_START, _GAP_SCAN_START + datetime.timedelta(days=_GAP_SCAN_DAYS)
    fires = []
    while minute < end:
        if schedule.matches(minute):
            fires.append(minute)
        minute += datetime.timedelta(minutes=1)
    if len(fires) < 2:
        return _GAP_SCAN_DAYS * 86400
    gaps = [b - a for a, b in zip(fires, fires[1:], strict=False)]
    # The gap across the scan's edges counts too (e.g. a monthly schedule seen twice).
    wrap = (fires[0] - _GAP_SCAN_START) + (end - fires[-1])
    return int(max([*gaps, wrap]).total_seconds())


def copy_interval_ms(policy: CopyPolicy) -> int:
    """The longest time between two copies of a topic under ``policy``."""
    if policy.schedule is not None:
        return longest_cron_gap_seconds(policy.schedule) * 1000
    return policy.interval_seconds * 1000
