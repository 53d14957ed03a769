"""The JSON merge patch (RFC 7386) that turns a stored status into the new one.

A merge patch keeps every key it does not name, so sending the new status as it is would leave a field
that went away (a finished rebuild's step, a table taken out of the spec, a partition's error cleared)
in the stored status for ever: each key the new status no longer has is sent as null, at every depth.
Lists are replaced whole, as a merge patch does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def status_patch(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The patch taking ``before`` to ``after`` (both JSON objects); empty when they are equal."""
    patch: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            inner = status_patch(old, value)
            if inner:
                patch[key] = inner
        elif key not in before or old != value:
            patch[key] = value
    for key in before:
        if key not in after:
            patch[key] = None
    return patch
