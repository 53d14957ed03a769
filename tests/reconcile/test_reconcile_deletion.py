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


def test_the_delete_waits_for_the_copies_and_cleanups_of_the_topic_still_running() -> None:
    # A copy or cleanup Job created before the TieredTopic was deleted still writes its tier (segments,
    # markers, a manifest, the partition state); a delete beside it would leave what it writes afterwards
    # in the bucket for ever, with the finalizer released. Found while building the campaign's
    # TieredTopic delete (docs/reliability.md, the operator mode).
    waiting = decide_deletion("Delete", False, "id", "none", writers=("tk-copy-broker-1-x",))
    assert waiting.step == "wait" and "tk-copy-broker-1-x" in waiting.reason
    assert decide_deletion("Delete", False, "id", "failed", writers=("tk-cleanup-t-y",)).step == "wait"
    assert decide_deletion("Delete", False, "id", "none", writers=()).step == "start-delete"
    # The way out, Retain and a never-tiered topic release as before: they delete nothing.
    assert decide_deletion("Delete", True, "id", "none", writers=("c",)).step == "release"
    assert decide_deletion("Retain", False, "id", "none", writers=("c",)).step == "release"
    assert decide_deletion("Delete", False, None, "none", writers=("c",)).step == "release"
