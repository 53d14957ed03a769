"""What the producers were told: every acknowledged record with its offset, and the fate of every
transaction. The checker holds what is read against it."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    value: bytes
    timestamp: int | None = None
    """The CreateTime the producer gave (kept for topics with time-based remote retention)."""


@dataclass
class Ledger:
    acked: dict[TopicPartition, dict[int, bytes]] = field(default_factory=lambda: defaultdict(dict))
    """Offset -> value of every record whose produce was acknowledged (acks=all), per partition."""
    aborted: set[bytes] = field(default_factory=set)
    """Values produced in transactions that were aborted: never visible to read_committed."""
    unacknowledged: set[bytes] = field(default_factory=set)
    """Values whose produce failed or whose answer never came: may be present (once) or absent."""
    deleted: dict[tuple[str, str], dict[int, dict[int, bytes]]] = field(default_factory=dict)
    """(topic, topic id) of a deleted incarnation -> partition -> offset -> value acknowledged in it: the
    topic recreated under the same name must never show any of them."""
    deleted_values: set[bytes] = field(default_factory=set)
    timestamps: dict[TopicPartition, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    """Offset -> CreateTime of acknowledged records produced with an explicit timestamp."""

    def ack(self, record: Record) -> None:
        known = self.acked[(record.topic, record.partition)].get(record.offset)
        if known is not None and known != record.value:
            # Two acknowledgements for one offset: the broker itself broke its promise.
            raise AssertionError(f"offset {record.offset} of {record.topic}-{record.partition} acked twice")
        self.acked[(record.topic, record.partition)][record.offset] = record.value
        if record.timestamp is not None:
            self.timestamps[(record.topic, record.partition)][record.offset] = record.timestamp

    def abort(self, records: list[Record]) -> None:
        self.aborted.update(r.value for r in records)

    def delete_incarnation(self, topic: str, topic_id: str) -> None:
        """``topic`` (incarnation ``topic_id``) was deleted: its acknowledged records move aside, and the
        next records acknowledged under the name belong to the new incarnation."""
        gone = {p: self.acked.pop((t, p)) for t, p in list(self.acked) if t == topic}
        self.deleted[(topic, topic_id)] = gone
        self.deleted_values.update(v for offsets in gone.values() for v in offsets.values())

    def count(self) -> int:
        return sum(len(offsets) for offsets in self.acked.values())

    def save(self, path: Path) -> None:
        rows = {
            "acked": {
                f"{t}/{p}": {str(o): v.hex() for o, v in offs.items()} for (t, p), offs in self.acked.items()
            },
            "aborted": sorted(v.hex() for v in self.aborted),
            "unacknowledged": sorted(v.hex() for v in self.unacknowledged),
        }
        path.write_text(json.dumps(rows))
