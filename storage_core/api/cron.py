"""Five-field cron expressions (minute hour day-of-month month day-of-week, UTC) and @-macros: parse once,
then ask whether a schedule fired in a time window.

Day-of-month and day-of-week combine as in Vixie cron: when both are restricted, a day matching either
fires. Names (JAN..DEC, SUN..SAT) are accepted in their fields; 7 is Sunday too.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# (name, low, high, names mapped to numbers)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {name: i + 1 for i, name in enumerate(_MONTHS)}),
    ("day-of-week", 0, 7, {name: i for i, name in enumerate(_DAYS)}),
)
MAX_SCAN_MINUTES = 366 * 24 * 60
"""A window longer than a year is cut to its last year: every valid schedule fires within 4 years, and a
year covers all but leap-day schedules, which is enough to answer "is it due"."""


@dataclass(frozen=True)
class CronSchedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_restricted: bool
    weekdays_restricted: bool

    def matches(self, when: datetime.datetime) -> bool:
        if when.minute not in self.minutes or when.hour not in self.hours or when.month not in self.months:
            return False
        day_ok = when.day in self.days
        weekday_ok = (when.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return day_ok or weekday_ok
        return day_ok and weekday_ok

    def fired_between(self, after: datetime.datetime, until: datetime.datetime) -> bool:
        """Whether the schedule fired at a minute in (after, until]."""
        start = after.replace(second=0, microsecond=0) + datetime.timedelta(minutes=1)
        end = until.replace(second=0, microsecond=0)
        start = max(start, end - datetime.timedelta(minutes=MAX_SCAN_MINUTES))
        minute = start
        while minute <= end:
            if self.matches(minute):
                return True
            minute += datetime.timedelta(minutes=1)
        return False


def _value(text: str, low: int, high: int, names: dict[str, int], field: str) -> int:
    upper = text.upper()
    if upper in names:
        return names[upper]
    if not text.isdigit():
        raise ValueError(f"{field} field: {text!r} is not a number")
    number = int(text)
    if not low <= number <= high:
        raise ValueError(f"{field} field: {number} is outside {low}-{high}")
    return number


def _field(text: str, low: int, high: int, names: dict[str, int], field: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"{field} field: step {step_text!r} is not a positive number")
            step = int(step_text)
        if body in ("*", "?"):
            first, last = low, high
        elif "-" in body:
            a, _, b = body.partition("-")
            first, last = _value(a, low, high, names, field), _value(b, low, high, names, field)
            if first > last:
                raise ValueError(f"{field} field: range {body!r} runs backwards")
        else:
            first = _value(body, low, high, names, field)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    return frozenset(values)


def parse_cron(expression: str) -> CronSchedule:
    """Parse ``expression``; ``ValueError`` names the bad field."""
    text = MACROS.get(expression.strip(), expression)
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(
            "not a 5-field cron expression (minute hour day month weekday) or one of " + ", ".join(MACROS)
        )
    parsed = [_field(part, low, high, names, name) for part, (name, low, high, names) in zip(parts, _FIELDS)]
    weekdays = frozenset(0 if d == 7 else d for d in parsed[4])
    return CronSchedule(
        minutes=parsed[0],
        hours=parsed[1],
        days=parsed[2],
        months=parsed[3],
        weekdays=weekdays,
        days_restricted=parts[2] not in ("*", "?"),
        weekdays_restricted=parts[4] not in ("*", "?"),
    )
