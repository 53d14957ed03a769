"""The trim-hold part of a cleanup Job's termination message: per topic incarnation, the summary
``status.trimHold`` is made of (:func:`storage_core.reconcile.trim_holds.summarize`), as compact arrays.

One entry per topic id ("" for a partition without one)::

    {"n": [held_partitions, overridden_partitions, more_partitions], "u": unknown (when set),
     "p": [[partition, window_to, to, [[group, offset], ...], [[group, offset, to, reason], ...],
            more_groups], ...]}

The summary is already bounded (``MAX_PARTITIONS`` partitions, ``MAX_GROUPS`` groups per list); long group
names can still outgrow the 4096 bytes, so :func:`cut_hold` shortens it in steps (``HOLD_CUTS``): one group
per list, then a few partitions (overridden ones first), then none. The counts and ``unknown`` always stay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from storage_core.api.trim_hold_status import HeldBy, MissedOffsets, PartitionTrimHold, TrimHoldStatus
from storage_core.reconcile.trim_holds import summarize

HOLD_CUTS = (1, 2, 3)
"""The levels of :func:`cut_hold`, tried in order until the message fits."""
FEW_PARTITIONS = 4
"""Partitions an entry keeps at cut level 2."""


def _row(p: PartitionTrimHold) -> list[Any]:
    return [
        p.partition,
        p.window_to,
        p.trimmed_to,
        [[h.group, h.offset] for h in p.held_by],
        [[o.group, o.offset, o.to, o.reason] for o in p.overridden],
        p.more_groups,
    ]


def encode_holds(partitions: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The entries of a cleanup report's partitions, by topic id; empty when none reported a hold."""
    by_id: dict[str, list[Mapping[str, Any]]] = {}
    for p in partitions:
        by_id.setdefault(str(p.get("topic_id") or ""), []).append(p)
    out = {}
    for key, rows in by_id.items():
        summary = summarize(rows)
        if summary is None:
            continue
        entry: dict[str, Any] = {
            "n": [summary.held_partitions, summary.overridden_partitions, summary.more_partitions],
            "p": [_row(p) for p in summary.partitions],
        }
        if summary.unknown is not None:
            entry["u"] = summary.unknown
        out[key] = entry
    return out


def cut_hold(entry: Mapping[str, Any], level: int) -> dict[str, Any]:
    """``entry`` shortened to ``level`` (1: one group per list; 2: also only ``FEW_PARTITIONS`` partitions,
    overridden ones first; 3: no partitions), the groups and partitions left out counted."""
    rows = []
    for partition, window_to, to, held, over, more in entry["p"]:
        dropped = max(0, len(held) - 1) + max(0, len(over) - 1)
        rows.append([partition, window_to, to, held[:1], over[:1], more + dropped])
    keep = {2: FEW_PARTITIONS, 3: 0}.get(level, len(rows))
    kept = sorted(sorted(rows, key=lambda r: (not r[4], r[0]))[:keep], key=lambda r: r[0])
    held, over, more = entry["n"]
    out = {**entry, "n": [held, over, more + len(rows) - len(kept)], "p": kept}
    return out


def decode_holds(holds: Mapping[str, Any]) -> dict[str, TrimHoldStatus]:
    """The summaries :func:`encode_holds` wrote, by topic id. ValueError when they are not its shape."""
    out = {}
    try:
        for key, entry in holds.items():
            held, over, more = entry["n"]
            partitions = [
                PartitionTrimHold(
                    partition=partition,
                    window_to=window_to,
                    trimmed_to=to,
                    held_by=[HeldBy(group=g, offset=o) for g, o in held_by],
                    overridden=[MissedOffsets(group=g, offset=o, to=t, reason=r) for g, o, t, r in missed],
                    more_groups=more_groups,
                )
                for partition, window_to, to, held_by, missed, more_groups in entry["p"]
            ]
            out[str(key)] = TrimHoldStatus(
                held_partitions=held,
                overridden_partitions=over,
                partitions=partitions,
                more_partitions=more,
                unknown=entry.get("u"),
            )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"unreadable trim hold summary ({type(exc).__name__})") from exc
    return out
