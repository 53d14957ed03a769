"""What the storage benchmark times: a raw fsspec baseline and the Tierkeeper path, on the same data and
the same target, in the same run.

Copy: ``fs.put_file`` of each tiered segment's .log/.index/.timeindex against a ``copy_partition`` pass
(which CRC-checks every batch and writes markers, remote indexes and the manifest too), for the whole
partition or one segment at a time.
Read, segment object by segment object: sequential ``cat_file`` ranges against (a) batch-level streaming
through the reader's prefetcher with CRC checks and (b) ``RemoteReader.read_from_offset`` decoding every
record.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from storage_core.adapters.store import RemoteStore
from storage_core.formats.segment_files import SegmentFileKind
from storage_core.remote.layout import SegmentObject, TopicPartitionId
from storage_core.remote.reader import RemoteReader
from storage_core.tiering.partition_copy import PartitionCopyResult, copy_partition
from storage_core.tiering.plan import CopyTask

T = TypeVar("T")


@dataclass(frozen=True)
class Timing:
    seconds: float
    cpu_seconds: float
    """CPU time of this process (all threads) during the call: less sensitive to other load than wall time."""


def timed(fn: Callable[[], T]) -> tuple[T, Timing]:
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    result = fn()
    return result, Timing(time.perf_counter() - t0, time.process_time() - cpu0)


def cpu_pressure() -> float | None:
    """Linux PSI 'some' avg10 for CPU: the share of the last 10 s in which a task waited for a CPU."""
    try:
        first = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return None
    return float(dict(f.split("=") for f in first.split()[1:])["avg10"])


def median(values: list[float]) -> float:
    return statistics.median(values)


def balanced_order(names: Sequence[str], turn: int) -> list[str]:
    """Row ``turn`` of a Williams design over ``names``: over ``len(names)`` turns (twice that for an odd
    count) every method runs in every position and right after every other method equally often.

    A plain rotation keeps the same neighbours in every turn, so one method always ran right after the
    same other one. On this VM a copy that follows a durable 1 GiB copy runs ~15% slower (the host
    is still writing the previous method's data back), which then lands on one side of a comparison.
    """
    n = len(names)
    first = [0]
    low, high = 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    row = [(i + turn) % n for i in first]
    if n % 2 and (turn // n) % 2:
        row.reverse()
    return [names[i] for i in row]


def warm(paths: list[Path]) -> None:
    """Read local files once (outside any timing) so the next readers find them in the page cache.

    Other jobs on a shared machine evict our pages between rounds, and whichever method ran first after
    an eviction would pay the disk reads for both; a segment that just rolled is hot in the broker's page
    cache anyway, which is the case the copy benchmark means to measure.
    """
    buf = bytearray(1 << 20)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def settle() -> bool:
    """Write back every dirty page and drop the clean ones (outside any timing), so each copy method starts
    from the same page cache; return whether the drop was allowed (it needs root).

    Each method writes ~1 GiB. Left in memory, the previous methods' pages made whichever method came
    third or fourth in a round 4-6x slower on this VM (plain ``put_file`` too: 2.5-2.9 GB/s, then
    0.45-0.65 GB/s for the fourth 1 GiB in a row), which swamped the difference being measured.
    """
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1")
    except OSError:
        return False
    return True


# ---- copy ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Segment:
    base_offset: int
    next_offset: int
    """Base offset of the following segment: a last stable offset at this value makes this segment, and
    no later one, eligible for copying."""
    log: Path
    companions: tuple[Path, ...]
    """.index and .timeindex (what a raw copy of the segment ships with it)."""

    def files(self) -> list[Path]:
        return [self.log, *self.companions]

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.files())


def tiered_segments(partition_dir: Path) -> list[Segment]:
    """Every segment but the active one (the last): what copy_partition copies when the LSO is the end."""
    logs = sorted(partition_dir.glob(f"*{SegmentFileKind.LOG.value}"))
    out = []
    for log, following in zip(logs, logs[1:]):
        extra = tuple(
            p
            for p in (
                log.with_suffix(SegmentFileKind.INDEX.value),
                log.with_suffix(SegmentFileKind.TIME_INDEX.value),
            )
            if p.exists()
        )
        out.append(Segment(int(log.stem), int(following.stem), log, extra))
    return out


def raw_put(store: RemoteStore, segments: list[Segment], prefix: str, fsync: bool = False) -> int:
    """The baseline: fsspec's own put_file of each segment file, as a plain backup tool would do it.

    ``fsync`` (local targets) also flushes each file to disk, as the copy path does for its data objects.
    """
    root = f"{store.root}/{prefix}"
    if store.is_local:
        store.fs.makedirs(root, exist_ok=True)
    sent = 0
    for segment in segments:
        for path in segment.files():
            store.put_file(str(path), f"{root}/{path.name}")
            if fsync and store.is_local:
                fd = os.open(f"{root}/{path.name}", os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            sent += path.stat().st_size
    return sent


def tierkeeper_copy(store: RemoteStore, log_dir: Path, topic: str, lso: int) -> PartitionCopyResult:
    """One tiering pass over the partition, as `tierkeeper copy` runs it: plan against the remote manifest,
    copy every eligible segment below ``lso`` (CRC-checked), publish the manifest."""
    task = CopyTask(
        log_dir=str(log_dir),
        topic=topic,
        partition=0,
        remote_url=store.url,
        storage_options=store.storage_options,
        last_stable_offset=lso,
        high_watermark=None,
    )
    result = copy_partition(task, store)
    if result.error is not None:
        raise RuntimeError(f"copy_partition failed: {result.error}")
    return result


def remove_prefix(store: RemoteStore, prefix: str) -> None:
    path = f"{store.root}/{prefix}"
    if store.fs.exists(path):
        store.fs.rm(path, recursive=True)


# ---- read ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TieredLog:
    key: str
    size: int
    base_offset: int
    end_offset: int


def tiered_logs(reader: RemoteReader, tp: TopicPartitionId) -> list[TieredLog]:
    manifest = reader.manifest(tp)
    return [
        TieredLog(
            reader.layout.object_key(tp, s.base_offset, s.segment_id, SegmentObject.LOG),
            s.objects[SegmentObject.LOG].size,
            s.base_offset,
            s.end_offset,
        )
        for s in manifest.segments
    ]


def raw_read(store: RemoteStore, log: TieredLog, block: int) -> int:
    """The baseline: one object read front to back with fsspec, one range of ``block`` at a time."""
    got = 0
    for start in range(0, log.size, block):
        got += len(store.fs.cat_file(log.key, start=start, end=min(start + block, log.size)))
    return got


def stream_batches(reader: RemoteReader, tp: TopicPartitionId, log: TieredLog) -> int:
    """Batch-level read of one segment: RemoteReader.read_batches_from_offset from its base offset (every
    batch CRC-checked, records not decoded; on file:// the object is mapped, elsewhere fetched with
    read-ahead), stopping after its last batch. Returns the records the batches hold."""
    records = 0
    for batch in reader.read_batches_from_offset(tp, log.base_offset):
        records += batch.header.records_count
        if batch.header.last_offset >= log.end_offset:
            break
    return records


def read_records(reader: RemoteReader, tp: TopicPartitionId, log: TieredLog) -> int:
    """Full read of one segment: RemoteReader.read_from_offset from its base offset, every record decoded
    and counted, stopping after its last offset (before the reader opens the next segment)."""
    count = 0
    for record in reader.read_from_offset(tp, log.base_offset):
        count += 1
        if record.offset >= log.end_offset:
            break
    return count


def pid_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by another process (e.g. the moto server), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks
