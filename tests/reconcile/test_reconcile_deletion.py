"""Deleting a TieredTopic: Retain keeps the tier, Delete runs a delete until it succeeded, and the
skip annotation is the way out when Kafka or the bucket stays unreachable."""

from __future__ import annotations

import pytest

from storage_core.reconcile.deletion import decide_deletion, needs_finalizer


@pytest.mark.parametrize(
    ("policy", "skip", "topic_id", "job", "step"),
    [
        ("Retain", False, "id", "none", "release"),
        (None, False, "id", "none", "release"),  # an unparsable spec deletes nothing
        ("Delete", False, None, "none", "release"),  # never tiered
        ("Delete", False, "id", "none", "start-delete"),
        ("Delete", False, "id", "running", "wait"),
        ("Delete", False, "id", "failed", "start-delete"),  # retried by a new Job
        ("Delete", False, "id", "succeeded", "release"),
        ("Delete", True, "id", "failed", "release"),  # the way out: the tier stays for a later delete
        ("Delete", True, "id", "running", "release"),
    ],
)
def test_decisions(policy: str | None, skip: bool, topic_id: str | None, job: str, step: str) -> None:
    assert decide_deletion(policy, skip, topic_id, job).step == step  # type: ignore[arg-type]


@pytest.mark.parametrize(("policy", "needed"), [("Delete", True), ("Retain", False), (None, False)])
def test_only_delete_needs_the_finalizer(policy: str | None, needed: bool) -> None:
    # Retain (the default) and an unparsable spec have nothing to do at deletion: no finalizer, so
    # creating them costs no write and deleting them never waits for the operator.
    assert needs_finalizer(policy) is needed
