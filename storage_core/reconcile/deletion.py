"""What deleting a TieredTopic does to its remote tier: a pure decision per round.

The operator holds the finalizer ``tierkeeper.io/remote-tier`` on every live TieredTopic whose
``deletionPolicy`` is ``Delete`` (:func:`needs_finalizer`): only there has a deletion work to do. A Retain
TieredTopic carries none, so creating one costs no finalizer write (10,000 of them: 10,000 writes fewer,
issue 15) and deleting one never waits for the operator. When one is deleted:
- ``deletionPolicy: Retain`` (default): the remote tier stays; a finalizer left from earlier (the policy
  was Delete, or an older operator put it on every object) goes at once.
- ``deletionPolicy: Delete``: a delete Job removes the topic's tier (this incarnation, through the storage
  core's crash-safe delete); the finalizer goes when it succeeded, and a failed Job is retried by a new
  one in a later round. It starts only once no copy or cleanup Job created before the deletion still runs
  for the topic: those write its tier, and what they wrote after the delete would stay for ever.
- The way out when Kafka or the bucket stays unreachable: annotate the object
  ``tierkeeper.io/skip-remote-deletion=true`` (or patch ``deletionPolicy: Retain``); the finalizer goes
  and the remote tier is left for a later ``tierkeeper cleanup --delete-topic``.
A topic never tiered (no topic id in its status) has nothing remote to delete.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

FINALIZER = "tierkeeper.io/remote-tier"
SKIP_ANNOTATION = "tierkeeper.io/skip-remote-deletion"

Step = Literal["release", "start-delete", "wait"]


@dataclass(frozen=True)
class DeletionDecision:
    step: Step
    reason: str


def needs_finalizer(policy: str | None) -> bool:
    """Whether a live TieredTopic with this ``deletionPolicy`` must carry :data:`FINALIZER`. A Delete set
    moments before the object is deleted takes effect only once a round has put the finalizer on; until
    then the remote tier is kept (never the other way round: nothing is deleted without it)."""
    return policy == "Delete"


def decide_deletion(
    policy: str | None,
    skip: bool,
    topic_id: str | None,
    delete_job: Literal["none", "running", "succeeded", "failed"],
    *,
    writers: Sequence[str] = (),
) -> DeletionDecision:
    """``policy``: the spec's deletionPolicy (None when the spec does not parse: nothing is deleted);
    ``writers``: the copy and cleanup Jobs of the topic still running (no new ones start for a TieredTopic
    being deleted, so the wait ends)."""
    if skip:
        return DeletionDecision("release", f"{SKIP_ANNOTATION} is set: the remote tier is kept")
    if policy != "Delete":
        return DeletionDecision("release", "deletionPolicy Retain: the remote tier is kept")
    if topic_id is None:
        return DeletionDecision("release", "nothing was tiered: no remote tier to delete")
    if delete_job == "succeeded":
        return DeletionDecision("release", "the remote tier was deleted")
    if delete_job == "running":
        return DeletionDecision("wait", "deleting the remote tier")
    if writers:
        return DeletionDecision(
            "wait", f"waiting for {', '.join(writers)} (writing the topic's tier) to end before deleting it"
        )
    return DeletionDecision(
        "start-delete",
        "deleting the remote tier" if delete_job == "none" else "the last delete failed; trying again",
    )
