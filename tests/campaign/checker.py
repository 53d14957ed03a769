"""The promise, checked: every acknowledged record readable exactly once, at its offset, with its value,
in order; no aborted record under read_committed; nothing else duplicated."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from campaign.ledger import Ledger, Record, TopicPartition

LOST = "lost"
CHANGED = "changed"
DUPLICATED = "duplicated"
OUT_OF_ORDER = "out_of_order"
ABORTED_VISIBLE = "aborted_visible"
UNREADABLE = "unreadable"
"""A reader (the gateway's client) got an error instead of the records."""
NOT_SETTLED = "not_settled"
"""Fault-free reconcile rounds did not bring every topic to Ready with its brokers trimmed."""


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
    counts = dict.fromkeys(
        (LOST, CHANGED, DUPLICATED, OUT_OF_ORDER, ABORTED_VISIBLE, UNREADABLE, NOT_SETTLED), 0
    )
    for finding in findings:
        counts[finding.kind] += 1
    return counts
