"""When a topic's next copy or cleanup is due, from its policy and when the last one ended."""

from __future__ import annotations

import datetime

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
