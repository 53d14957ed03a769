"""What a recovery records, and where.

Two records with different jobs:

* **Progress** (the truth for resuming) is committed to Kafka *inside* each restore transaction, as the
  offset of a consumer group on the recreated topic's partition: offset = the next new offset after the
  restored records, metadata = :class:`Progress` (source incarnation, next old offset, records restored).
  It commits or aborts together with the records, so a crash can never leave the two apart.
* **Claim and chunk mappings** live in the remote tier, under the *source* incarnation::

      <topic>-<oldId>/recovery/<newId>/claim.json          which live topic restores this incarnation
      <topic>-<oldId>/recovery/<newId>/<p>/<20-digit old offset>.json   runs of one transaction
      <topic>-<oldId>/recovery/<newId>/summary.json        the last run's summary

  A chunk mapping is written after its records are flushed and before the transaction commits; it is
  keyed by the old offset the transaction started at, so a transaction redone after a crash overwrites
  its aborted predecessor's file. Only chunks chained from the partition's start up to the committed
  progress count.

Keeping them under the old incarnation (not the new one) means the recreated topic does not appear as a
second incarnation in the remote tier before anything of it has been tiered; ``list_partitions`` only
lists numeric directories, so ``recovery/`` never looks like a partition.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from storage_core.errors import CorruptDataError, RemoteObjectNotFound
from storage_core.recovery.mapping import OffsetRun
from storage_core.remote.layout import OFFSET_DIGITS, RemoteLayout, check_non_negative
from storage_core.remote.store_api import ObjectStore

STATE_VERSION = 1


class _StoredRecord(BaseModel):
    """What every record the remote tier holds for a recovery starts with (its JSON's first field)."""

    model_config = ConfigDict(frozen=True)

    version: int = STATE_VERSION


class Claim(_StoredRecord):
    """Marks a live topic id as the target of a recovery of one incarnation."""

    topic: str
    source_topic_id: str
    target_topic_id: str
    partitions: int
    created_at_ms: int


class ChunkMapping(_StoredRecord):
    """The records one restore transaction moved: old offsets [first_old, next_old) -> ``runs``."""

    partition: int
    first_old: int
    next_old: int
    runs: list[tuple[int, int, int]] = Field(default_factory=list)
    """(old_start, new_start, length) entries."""

    def offset_runs(self) -> list[OffsetRun]:
        return [OffsetRun(*r) for r in self.runs]


class Progress(BaseModel):
    """Offset-commit metadata of one partition: how far the restore got (kept under 4 KiB, the broker's
    default ``offset.metadata.max.bytes``)."""

    model_config = ConfigDict(frozen=True)

    v: int = STATE_VERSION
    source: str
    next_old: int
    restored: int

    def encode(self) -> str:
        return self.model_dump_json()

    @classmethod
    def decode(cls, text: str | None) -> Progress | None:
        if not text:
            return None
        try:
            return cls.model_validate_json(text)
        except ValidationError:
            return None


class RecoveryState:
    """The remote-tier records of recovering ``source_topic_id`` of ``topic`` into ``target_topic_id``."""

    def __init__(self, store: ObjectStore, topic: str, source_topic_id: str, target_topic_id: str) -> None:
        self.store = store
        self.topic = topic
        self.source_topic_id = source_topic_id
        self.target_topic_id = target_topic_id
        self.dir = recovery_dir(store, topic, source_topic_id, target_topic_id)

    def read_claim(self) -> Claim | None:
        return read_claim(self.store, self.topic, self.source_topic_id, self.target_topic_id)

    def write_claim(self, claim: Claim) -> None:
        self.store.put_atomic(f"{self.dir}/claim.json", claim.model_dump_json().encode())

    def write_chunk(self, chunk: ChunkMapping) -> None:
        self.store.put_atomic(
            self._chunk_key(chunk.partition, chunk.first_old), chunk.model_dump_json().encode()
        )

    def write_summary(self, summary_json: bytes) -> None:
        self.store.put_atomic(f"{self.dir}/summary.json", summary_json)

    def chain(self, partition: int, start_old: int, committed_next_old: int) -> list[ChunkMapping] | None:
        """The committed chunks of ``partition`` in order, from ``start_old`` up to ``committed_next_old``.

        None when the chain is broken (a chunk file missing or unreadable): the records are restored
        but their exact mapping is not known.
        """
        if committed_next_old <= start_old:
            return []
        by_first: dict[int, str] = {}
        for key, _size in self.store.list_dir(f"{self.dir}/{check_non_negative('partition', partition)}"):
            stem = key.rsplit("/", 1)[-1].removesuffix(".json")
            if len(stem) == OFFSET_DIGITS and stem.isdigit():
                by_first[int(stem)] = key
        out: list[ChunkMapping] = []
        at = start_old
        while at < committed_next_old:
            chunk_key = by_first.get(at)
            if chunk_key is None:
                return None
            try:
                chunk = ChunkMapping.model_validate_json(self.store.get(chunk_key))
            except (ValidationError, RemoteObjectNotFound):
                return None
            if chunk.next_old <= at or chunk.next_old > committed_next_old:
                return None  # an aborted transaction's file that was never redone, or a foreign one
            out.append(chunk)
            at = chunk.next_old
        return out

    def _chunk_key(self, partition: int, first_old: int) -> str:
        partition = check_non_negative("partition", partition)
        return f"{self.dir}/{partition}/{check_non_negative('offset', first_old):0{OFFSET_DIGITS}d}.json"


def recovery_dir(store: ObjectStore, topic: str, source_topic_id: str, target_topic_id: str) -> str:
    return RemoteLayout(store.root).recovery_dir(topic, source_topic_id, target_topic_id)


def read_claim(store: ObjectStore, topic: str, source_topic_id: str, target_topic_id: str) -> Claim | None:
    key = f"{recovery_dir(store, topic, source_topic_id, target_topic_id)}/claim.json"
    try:
        data = store.get(key)
    except RemoteObjectNotFound:
        return None
    try:
        return Claim.model_validate_json(data)
    except ValidationError as exc:
        raise CorruptDataError(
            f"unreadable recovery claim: {exc.errors()[0]['msg']}", topic=topic, path=key
        ) from exc


def restore_group(topic: str, target_topic_id: str) -> str:
    """The consumer group holding the restore progress of one target topic incarnation (one committed
    offset per partition, committed with each chunk's records)."""
    return f"tierkeeper-recover-{topic}-{target_topic_id}"


def restore_transactional_id(group: str, partition: int) -> str:
    """The transactional id of restoring one partition: one per partition of a target incarnation, so
    partitions can be restored in parallel (Spark tasks) while a rerun, or a retried or speculative task,
    reuses it: its producer fences the predecessor's, and the broker aborts whatever that one left open
    before the rerun reads the partition's committed progress."""
    return f"{group}-p{partition}"
