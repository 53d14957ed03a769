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
    since = _last_time(last)
    if since is None:
        return True
    if policy.schedule is not None:
        return parse_cron(policy.schedule).fired_between(since, now)
    return now - since >= datetime.timedelta(seconds=policy.interval_seconds)


def interval_due(interval_seconds: int, last: RunOutcome | None, now: datetime.datetime) -> bool:
    since = _last_time(last)
    return since is None or now - since >= datetime.timedelta(seconds=interval_seconds)


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
