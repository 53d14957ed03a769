"""Re-produce one partition's committed history, a transaction per chunk, resumable and exactly once.

Per chunk: read records (read_committed, offset order) -> produce them in one transaction -> flush to
learn their new offsets -> store the chunk's offset mapping -> commit the progress with the records.
A crash anywhere before the commit leaves an aborted transaction (fenced and aborted by the next run's
producer), so the next run starts again at the committed progress; after the commit, the records and
the progress are both there. Either way each record lands exactly once.

Side effects go through :class:`RestoreSink` (Kafka) and a chunk writer (remote tier), passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from storage_core.errors import KafkaAdminError
from storage_core.faults import fault_point
from storage_core.formats.records import Record
from storage_core.recovery.mapping import OffsetRun, runs_from_pairs
from storage_core.recovery.state import ChunkMapping, Progress
from storage_core.throttle import RateLimiter

CHUNK_ATTEMPTS = 3


class ChunkAborted(KafkaAdminError):
    """A restore transaction was aborted and can be redone (a retriable or abortable Kafka error)."""


class RestoreSink(Protocol):
    """Where restored records go: one transaction at a time, for one partition at a time."""

    def produce_chunk(self, partition: int, records: Sequence[Record]) -> list[tuple[int, int]]:
        """Begin a transaction, produce ``records`` in order and flush; ``(old, new)`` offset pairs."""

    def commit_chunk(self, partition: int, new_next: int, progress: Progress) -> None:
        """Commit the open transaction together with the partition's progress."""

    def abort_chunk(self) -> None:
        """Abort the open transaction, if any; best effort, never raises (the next run's producer
        fences and aborts whatever is left open)."""


@dataclass(frozen=True)
class ChunkLimits:
    records: int = 10_000
    bytes: int = 16 << 20


@dataclass(frozen=True)
class PartitionStart:
    """Where a partition's restore resumes: committed progress, or the remote start for a fresh one."""

    partition: int
    next_old: int
    end_old: int
    restored: int = 0
    new_next: int | None = None


@dataclass
class PartitionOutcome:
    partition: int
    next_old: int
    restored_total: int
    restored_now: int = 0
    runs: list[OffsetRun] = field(default_factory=list)
    """Runs of the chunks committed in this run."""


def record_size(record: Record) -> int:
    return (
        len(record.key or b"")
        + len(record.value or b"")
        + sum(len(k) + len(v or b"") for k, v in record.headers)
    )


def chunks(records: Iterator[Record], limits: ChunkLimits) -> Iterator[tuple[list[Record], int]]:
    """Group ``records`` into chunks of at most ``limits`` (a single oversized record is its own chunk)."""
    chunk: list[Record] = []
    size = 0
    for record in records:
        n = record_size(record)
        if chunk and (len(chunk) >= limits.records or size + n > limits.bytes):
            yield chunk, size
            chunk, size = [], 0
        chunk.append(record)
        size += n
    if chunk:
        yield chunk, size


def restore_partition(
    start: PartitionStart,
    source: str,
    read_from: Callable[[int], Iterator[Record]],
    sink: RestoreSink,
    write_chunk: Callable[[ChunkMapping], None],
    limits: ChunkLimits,
    limiter: RateLimiter | None,
    advance: Callable[[int], None],
) -> PartitionOutcome:
    """Restore ``[start.next_old, start.end_old]`` of one partition; ``advance`` gets old offsets covered.

    ``limiter`` (the command's ``--max-bytes-per-second``) is charged each chunk's record bytes before
    the chunk is produced.
    """
    out = PartitionOutcome(start.partition, start.next_old, start.restored)
    while out.next_old <= start.end_old:
        produced_any = False
        # The reader stops at the end of the manifest it loaded; calling it again from where it stopped
        # picks up segments a stale stored manifest did not list, and yields nothing at the true end.
        for chunk, nbytes in chunks(read_from(out.next_old), limits):
            produced_any = True
            if limiter is not None:
                limiter.acquire(nbytes)
            runs = _commit_chunk(start.partition, source, chunk, out, sink, write_chunk)
            before = out.next_old
            out.next_old = chunk[-1].offset + 1
            out.restored_total += len(chunk)
            out.restored_now += len(chunk)
            out.runs.extend(runs)
            advance(out.next_old - before)
        if not produced_any:
            break
    if out.next_old <= start.end_old:
        advance(start.end_old + 1 - out.next_old)  # the rest is aborted data and control records
    return out


def _commit_chunk(
    partition: int,
    source: str,
    chunk: list[Record],
    out: PartitionOutcome,
    sink: RestoreSink,
    write_chunk: Callable[[ChunkMapping], None],
) -> list[OffsetRun]:
    next_old = chunk[-1].offset + 1
    progress = Progress(source=source, next_old=next_old, restored=out.restored_total + len(chunk))
    attempt = 1
    while True:
        try:
            pairs = sink.produce_chunk(partition, chunk)
            fault_point("recover.chunk.produced")
            runs = runs_from_pairs(pairs)
            write_chunk(
                ChunkMapping(
                    partition=partition,
                    first_old=out.next_old,
                    next_old=next_old,
                    runs=[(r.old_start, r.new_start, r.length) for r in runs],
                )
            )
            sink.commit_chunk(partition, max(new for _, new in pairs) + 1, progress)
            fault_point("recover.chunk.committed")
            return runs
        except ChunkAborted:
            sink.abort_chunk()
            if attempt >= CHUNK_ATTEMPTS:
                raise
            attempt += 1
        except BaseException:
            # An interrupted run leaves nothing open for the transaction timeout to clean up.
            sink.abort_chunk()
            raise
