"""Messages for statuses, events and Job results: one line, bounded."""

from __future__ import annotations


def one_line(text: object, limit: int) -> str:
    """``text`` with every run of whitespace (newlines included) collapsed to one space, cut to ``limit``
    characters with ``...`` at the end when longer."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
