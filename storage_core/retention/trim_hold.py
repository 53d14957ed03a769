"""Which consumer groups hold a partition's local trim, and where the held trim goes (pure).

The local trim (``local_trim.plan_local_trim``) moves the brokers' log start for every reader. A group
that reads the brokers directly needs their copy of everything from its committed offset on, so:

- **who holds** (per topic, :func:`group_holds`): a group not in ``ignore_groups`` with a member that
  reads directly (no fresh gateway sighting carried it), or with no members but last seen reading
  directly (or never seen at all: unknown history holds) and empty for at most ``inactive_group_ms``.
  A group whose members all read through gateways does not hold: the gateway serves it the history.
- **where the trim goes** (per partition, :func:`plan_held_trim`): the window's target lowered to the
  lowest committed offset of a holding group below it, but never below the bound: ``plan_local_trim``
  over the held segments with ``RetentionPolicy(max_age_ms)`` and ``RetentionPolicy(max_bytes)`` says how
  far the bound trims, and what remote retention expired goes whatever holds it (Kafka's own retention
  would have deleted it without Tierkeeper). The hold only lowers the window's target, which keeps its
  cap at the highest tiered offset + 1.

Kafka does not say since when a group is empty nor how its former members read: :func:`remember` keeps
that in the topic's ``TrimHoldState`` from one cleanup to the next. A group with no members whose
committed offsets moved since the last round counts as empty from this round on: a reader that assigns
partitions and commits (Flink's Kafka source) is never a member, and still reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from storage_core.api.trim_hold import TrimHold
from storage_core.remote.metadata import GroupMemory, SegmentMetadata, TrimHoldState
from storage_core.retention.local_trim import expired_floor, plan_local_trim
from storage_core.retention.policy import UNLIMITED, RetentionPolicy

OverrideReason = Literal["maxAge", "maxBytes", "retention"]
"""Why the trim passes a holding group's offset: the ``trimHold`` bound by age or bytes, or the topic's
remote retention expired those offsets (they leave the brokers as Kafka's retention would delete them)."""


@dataclass(frozen=True)
class GroupSeen:
    """What one cleanup observed of a consumer group, for one topic (picklable: Spark tasks get it)."""

    group: str
    committed: Mapping[int, int] = field(default_factory=dict)
    """Partition -> committed offset, for the topic's partitions the group has one for."""
    members: int = 0
    direct: bool = False
    """Some current member reads the brokers directly (no fresh gateway sighting carried it)."""
    gateway_seen_ms: int | None = None
    """The ``seen_ms`` of the group's newest live gateway sighting (None: no gateway reports it)."""


def remember(previous: TrimHoldState, groups: Sequence[GroupSeen], now_ms: int) -> TrimHoldState:
    """The topic's memory after this cleanup's observation: groups without a committed offset on the
    topic (deleted, expired, or never committed here) are dropped."""
    out: dict[str, GroupMemory] = {}
    for seen in groups:
        if not seen.committed:
            continue
        old = previous.groups.get(seen.group, GroupMemory())
        update: dict[str, Any] = {"committed": dict(seen.committed), "empty_since_ms": None}
        if seen.members == 0:
            # Empty since the first round that saw it so, unless its commits moved since the last round:
            # then something still reads for it (a reader that assigns partitions and commits).
            moved = bool(old.committed) and old.committed != dict(seen.committed)
            keep = old.empty_since_ms is not None and not moved
            update["empty_since_ms"] = old.empty_since_ms if keep else now_ms
        elif seen.direct:
            update["direct_seen_ms"] = now_ms
        else:
            update["gateway_seen_ms"] = now_ms
        out[seen.group] = old.model_copy(update=update)
    return TrimHoldState(groups=out)


def group_holds(seen: GroupSeen, memory: GroupMemory, hold: TrimHold, now_ms: int) -> bool:
    """Whether ``seen`` holds the topic's trim (``memory``: what :func:`remember` made of it this round)."""
    if not seen.committed or hold.ignores(seen.group):
        return False
    if seen.members:
        return seen.direct
    gateway = max((t for t in (memory.gateway_seen_ms, seen.gateway_seen_ms) if t is not None), default=None)
    last_direct = gateway is None or (memory.direct_seen_ms is not None and memory.direct_seen_ms >= gateway)
    if not last_direct:
        return False
    since = memory.empty_since_ms if memory.empty_since_ms is not None else now_ms
    return hold.inactive_group_ms == UNLIMITED or now_ms - since <= hold.inactive_group_ms


def holding_offsets(
    groups: Sequence[GroupSeen], memory: TrimHoldState, hold: TrimHold, now_ms: int
) -> dict[str, dict[int, int]]:
    """The holding groups' committed offsets (group -> partition -> offset)."""
    return {
        g.group: dict(g.committed)
        for g in groups
        if group_holds(g, memory.groups.get(g.group, GroupMemory()), hold, now_ms)
    }


@dataclass(frozen=True)
class HeldTrim:
    """One partition's trim under the hold."""

    window_to: int | None
    """Where the local window alone would trim (None: nothing)."""
    to: int | None
    """Where the trim goes (None: nothing is trimmed)."""
    held_by: tuple[tuple[str, int], ...] = ()
    """(group, committed offset) of the holding groups the trim stops at or before."""
    overridden: tuple[tuple[str, int, int, OverrideReason], ...] = ()
    """(group, committed offset, trim-to, reason): holding groups the trim passes; they miss the offsets
    [committed, trim-to) on the brokers."""

    def report(self) -> dict[str, Any]:
        """The cleanup report's ``trim_hold`` entry (the status, events and metrics read this shape)."""
        return {
            "window_to": self.window_to,
            "to": self.to,
            "held_by": [{"group": g, "offset": o} for g, o in self.held_by],
            "overridden": [{"group": g, "offset": o, "to": t, "reason": r} for g, o, t, r in self.overridden],
        }


def plan_held_trim(
    window_to: int | None,
    log_start_offset: int,
    finished: Sequence[SegmentMetadata],
    holders: Mapping[str, int],
    hold: TrimHold,
    now_ms: int,
    *,
    quarantined: Sequence[SegmentMetadata] = (),
    expired_offset: int | None = None,
) -> HeldTrim:
    """Where the trim of one partition goes: ``window_to`` (``plan_local_trim``'s target) lowered to the
    lowest of ``holders`` (holding group -> committed offset on this partition) below it, never below the
    bound. ``finished``, ``quarantined`` and ``expired_offset`` are as for ``plan_local_trim``."""
    if window_to is None:
        return HeldTrim(None, None)
    below = sorted((o, g) for g, o in holders.items() if o < window_to)
    if not below:
        return HeldTrim(window_to, window_to)
    held = below[0][0]
    # The bound over the held data only: segments the window would trim anyway.
    kept = [m for m in finished if m.end_offset < window_to]
    bounds: list[tuple[int, OverrideReason]] = [
        (expired_floor(log_start_offset, expired_offset, quarantined), "retention")
    ]
    limits: tuple[tuple[RetentionPolicy, OverrideReason], ...] = (
        (RetentionPolicy(retention_ms=hold.max_age_ms), "maxAge"),
        (RetentionPolicy(retention_bytes=hold.max_bytes), "maxBytes"),
    )
    for policy, reason in limits:
        if policy.retention_ms == UNLIMITED and policy.retention_bytes == UNLIMITED:
            continue
        to = plan_local_trim(
            kept, log_start_offset, policy, now_ms, quarantined=quarantined, expired_offset=expired_offset
        )
        if to is not None:
            bounds.append((to, reason))
    # The furthest bound wins. A limit's plan includes what remote retention expired, so a limit that
    # reaches no further than that is not the reason.
    bound, reason = max(bounds, key=lambda b: (b[0], b[1] == "retention"))
    target = min(window_to, max(held, bound))
    if target <= log_start_offset:
        # Nothing moves (a group below the log start lost those offsets before: holding keeps the rest).
        return HeldTrim(window_to, None, tuple((g, o) for o, g in below))
    held_by = tuple((g, o) for o, g in below if o >= target)
    overridden = tuple((g, o, target, reason) for o, g in below if o < target)
    return HeldTrim(window_to, target, held_by, overridden)
