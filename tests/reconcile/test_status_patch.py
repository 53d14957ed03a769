"""status_patch (operator/tierkeeper_operator/status_patch.py): applied as the API server applies a JSON
merge patch (RFC 7386), it gives exactly the new status, removed fields included, at every depth."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tierkeeper_operator.status_patch import status_patch


def _apply(target: Any, patch: Any) -> Any:
    """RFC 7386's MergePatch, as the API server applies ``application/merge-patch+json``."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _apply(out.get(key), value)
    return out


def test_a_field_gone_is_sent_as_null_at_every_depth_and_nothing_else_is_sent() -> None:
    before = {
        "phase": "Ready",
        "lastRebuild": {"step": "Restoring", "restored": 3},
        "table": {"lastExport": {"result": "Failed", "message": "bucket gone"}, "rows": 10},
        "conditions": [{"type": "Ready", "status": "False"}],
    }
    after = {
        "phase": "Ready",
        "lastRebuild": {"restored": 3},
        "table": {"lastExport": {"result": "Succeeded"}, "rows": 12},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    assert status_patch(before, after) == {
        "lastRebuild": {"step": None},
        "table": {"lastExport": {"result": "Succeeded", "message": None}, "rows": 12},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    assert status_patch(after, after) == {}
    assert _apply(before, status_patch(before, after)) == after


# JSON statuses without nulls (the operator writes exclude_none): objects of scalars, lists and objects.
_scalars = st.one_of(st.booleans(), st.integers(), st.text(max_size=5))
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abcde"), inner, max_size=4)
    ),
    max_leaves=12,
)
_objects = st.dictionaries(st.sampled_from("abcdef"), _json, max_size=5)


@given(_objects, _objects)
def test_applying_the_patch_gives_the_new_status(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert _apply(before, status_patch(before, after)) == after
