"""Cron schedules: parsing errors name the field; firing windows are exact to the minute."""

from __future__ import annotations

import datetime

import pytest

from storage_core.api.cron import parse_cron

T = datetime.datetime(2026, 3, 2, 10, 0, tzinfo=datetime.UTC)  # a Monday


@pytest.mark.parametrize(
    ("expression", "fires_at", "not_before"),
    [
        ("*/15 * * * *", T + datetime.timedelta(minutes=15), T + datetime.timedelta(minutes=14)),
        ("@hourly", T + datetime.timedelta(hours=1), T + datetime.timedelta(minutes=59)),
        ("30 2 * * MON-FRI", T + datetime.timedelta(hours=16, minutes=30), T + datetime.timedelta(hours=16)),
        (
            "0 0 1 * *",
            datetime.datetime(2026, 4, 1, tzinfo=datetime.UTC),
            datetime.datetime(2026, 3, 31, 23, 59, tzinfo=datetime.UTC),
        ),
    ],
)
def test_fires_in_window(expression: str, fires_at: datetime.datetime, not_before: datetime.datetime) -> None:
    schedule = parse_cron(expression)
    assert schedule.fired_between(T, fires_at)
    assert not schedule.fired_between(T, not_before)


def test_sunday_is_0_and_7() -> None:
    sunday = datetime.datetime(2026, 3, 8, 0, 0, tzinfo=datetime.UTC)
    for expression in ("0 0 * * 0", "0 0 * * 7", "0 0 * * SUN"):
        assert parse_cron(expression).matches(sunday)


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("61 * * * *", "minute field: 61"),
        ("* * * 13 *", "month field: 13"),
        ("*/0 * * * *", "step"),
        ("* * *", "5-field"),
    ],
)
def test_errors_name_the_field(expression: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_cron(expression)
