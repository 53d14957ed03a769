"""The promise, checked: every acknowledged record readable exactly once, at its offset, with its value,
in order; no aborted record under read_committed; nothing else duplicated."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from campaign.ledger import Ledger, Record, TopicPartition

LOST = "lost"
CHANGED = "changed"
DUPLICATED = "duplicated"
OUT_OF_ORDER = "out_of_order"
ABORTED_VISIBLE = "aborted_visible"
OLD_INCARNATION = "old_incarnation"
"""A record of a deleted incarnation read under the name of the topic recreated after it."""
BROKER_NOT_REJOINED = "broker_not_rejoined"
"""A broker restored by ``tierkeeper rebuild`` did not come back into the ISR of every partition."""
RETAINED = "retained"
"""Remote retention kept a segment it must delete (readable below what it allows to delete)."""
OVER_DELETED = "over_deleted"
"""Remote retention deleted a segment it must keep."""
ORPHAN = "orphan"
"""An object left in the bucket after the orphan sweep that no metadata references."""
UNREADABLE = "unreadable"
"""A reader (the gateway's client) got an error instead of the records."""
NOT_SETTLED = "not_settled"
"""Fault-free reconcile rounds did not bring every topic to Ready with its brokers trimmed."""
TIER_NOT_DELETED = "tier_not_deleted"
"""A TieredTopic with ``deletionPolicy: Delete`` was deleted and an object of its topic is still in the
bucket (or the TieredTopic never went: its delete did not finish)."""


KINDS = (
    LOST,
    CHANGED,
    DUPLICATED,
    OUT_OF_ORDER,
    ABORTED_VISIBLE,
    OLD_INCARNATION,
    BROKER_NOT_REJOINED,
    RETAINED,
    OVER_DELETED,
    ORPHAN,
    UNREADABLE,
    NOT_SETTLED,
    TIER_NOT_DELETED,
)


@dataclass(frozen=True)
class Finding:
    kind: str
    topic: str
    partition: int
    offset: int
    detail: str = ""

    def describe(self) -> str:
        return f"{self.kind}: {self.topic}-{self.partition}@{self.offset} {self.detail}".rstrip()


def check(
    ledger: Ledger,
    read: Iterable[Record],
    *,
    read_committed: bool,
    retained_from: Mapping[TopicPartition, int] | None = None,
    topics: Iterable[str] | None = None,
) -> list[Finding]:
    """Findings of one read of ``topics`` (default: every topic of the ledger) from offset 0 to the end.

    ``retained_from``: per partition, the lowest offset retention must still keep; acknowledged records
    below it may be gone (but never changed or duplicated)."""
    wanted = set(topics) if topics is not None else {t for t, _ in ledger.acked}
    bounds = retained_from or {}
    findings: list[Finding] = []
    seen_offsets: dict[TopicPartition, dict[int, bytes]] = defaultdict(dict)
    last_offset: dict[TopicPartition, int] = {}
    where_value: dict[bytes, Record] = {}
    for record in read:
        tp = (record.topic, record.partition)
        if record.topic not in wanted:
            continue
        previous = last_offset.get(tp)
        if previous is not None and record.offset <= previous:
            kind = DUPLICATED if record.offset in seen_offsets[tp] else OUT_OF_ORDER
            findings.append(Finding(kind, *tp, record.offset, f"after offset {previous}"))
        last_offset[tp] = max(record.offset, previous if previous is not None else -1)
        seen_offsets[tp][record.offset] = record.value
        first = where_value.get(record.value)
        if first is not None and (first.topic, first.partition, first.offset) != (*tp, record.offset):
            findings.append(
                Finding(
                    DUPLICATED,
                    *tp,
                    record.offset,
                    f"value also at {first.topic}-{first.partition}@{first.offset}",
                )
            )
        where_value.setdefault(record.value, record)
        if record.value in ledger.deleted_values:
            findings.append(
                Finding(OLD_INCARNATION, *tp, record.offset, record.value[:40].decode(errors="replace"))
            )
        if read_committed and record.value in ledger.aborted:
            findings.append(Finding(ABORTED_VISIBLE, *tp, record.offset))
    for tp, acked in ledger.acked.items():
        if tp[0] not in wanted:
            continue
        bound = bounds.get(tp, 0)
        got = seen_offsets.get(tp, {})
        for offset, value in sorted(acked.items()):
            found = got.get(offset)
            if found is None:
                if offset >= bound:
                    findings.append(Finding(LOST, *tp, offset))
            elif found != value:
                findings.append(Finding(CHANGED, *tp, offset, f"read {found[:40]!r}, acked {value[:40]!r}"))
    return findings


def summary(findings: list[Finding]) -> dict[str, int]:
    counts = dict.fromkeys(KINDS, 0)
    for finding in findings:
        counts[finding.kind] += 1
    return counts


Segment = tuple[int, int, int]
"""A served remote segment: first offset, last offset, bytes of its .log object as the bucket lists it."""


def retention_prefix(
    segments: Sequence[Segment],
    timestamps: Mapping[int, int],
    *,
    retention_ms: int,
    retention_bytes: int,
    now_ms: int,
    unknown_expired: bool,
) -> int:
    """How many of the oldest ``segments`` remote retention deletes at ``now_ms``, from the producer's own
    timestamps (``timestamps``: offset -> CreateTime of the acknowledged records) and the bucket's sizes,
    not the tier's metadata. A segment expires by time when all its records are older than the window
    (a segment holding no acknowledged record counts as ``unknown_expired``); by size, the oldest go until
    the rest fits the window. Deletion is a prefix: the first segment that stays stops it."""
    count = 0
    if retention_ms >= 0:
        for first, last, _ in segments:
            stamps = [t for o, t in timestamps.items() if first <= o <= last]
            expired = max(stamps) < now_ms - retention_ms if stamps else unknown_expired
            if not expired:
                break
            count += 1
    if retention_bytes >= 0:
        total = sum(size for _, _, size in segments[count:])
        while count < len(segments) and total > retention_bytes:
            total -= segments[count][2]
            count += 1
    return count


def check_retention(
    topic: str,
    partition: int,
    before: Sequence[Segment],
    after: Sequence[Segment],
    timestamps: Mapping[int, int],
    *,
    retention_ms: int,
    retention_bytes: int,
    started_ms: int,
    finished_ms: int,
) -> tuple[list[Finding], int]:
    """Findings of one retention pass that ran between ``started_ms`` and ``finished_ms`` over a partition
    whose served segments were ``before`` and are ``after``; and the lowest offset the tier must still
    serve (everything acknowledged from there on must be readable).

    Retention with the clock anywhere in that span deletes between ``low`` (at the start, records without
    a timestamp kept) and ``high`` (at the end, such records gone) of the oldest segments: fewer is a
    segment kept that it deletes, more one deleted that it keeps."""
    rule = {"retention_ms": retention_ms, "retention_bytes": retention_bytes}
    low = retention_prefix(before, timestamps, now_ms=started_ms, unknown_expired=False, **rule)
    high = retention_prefix(before, timestamps, now_ms=finished_ms, unknown_expired=True, **rule)
    lasts = [last for _, last, _ in before]
    kept = [last for _, last, _ in after]
    deleted = len(before) - len(after)
    if high < len(before):
        must_keep_from = before[high][0]
    elif lasts:
        must_keep_from = lasts[-1] + 1
    else:
        # An empty tier: the reconciler's own cleanups may have expired all it held (by time: by size a
        # tier never empties), so only records the window keeps by their stamps must be readable.
        live = [o for o, t in timestamps.items() if retention_ms < 0 or t >= finished_ms - retention_ms]
        must_keep_from = min(live, default=max(timestamps, default=-1) + 1)
    if kept != lasts[deleted:] or deleted < 0:
        detail = f"served before {lasts}, after {kept}: not a prefix deleted"
        return [Finding(OVER_DELETED, topic, partition, -1, detail)], must_keep_from
    if deleted < low:
        first, last, _ = before[deleted]
        detail = f"segment {first}..{last} kept; retention deletes the oldest {low} of {len(before)}"
        return [Finding(RETAINED, topic, partition, first, detail)], must_keep_from
    if deleted > high:
        first, last, _ = before[high]
        detail = f"segment {first}..{last} deleted; retention deletes only the oldest {high} of {len(before)}"
        return [Finding(OVER_DELETED, topic, partition, first, detail)], must_keep_from
    return [], must_keep_from
