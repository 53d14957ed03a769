"""Download planned partitions into the staging area: parallel, streamed in bounded chunks, verified.

Each file is written under a temporary name, checked against the size and checksum recorded when it
was tiered (a ``.log``'s batches are CRC-checked on the way), fsynced and only then renamed to its real
name, so a file with a real name is always whole. A resumed run therefore keeps every correctly named
file of the right size, deletes the rest (temporaries, files a newer plan no longer wants) and downloads
only what is missing.

Memory is bounded by ``parallelism x CHUNK`` whatever the segment sizes.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from storage_core.errors import CorruptDataError, TierkeeperError
from storage_core.faults import fault_point
from storage_core.formats.batch_chain import BatchChainCheck
from storage_core.formats.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    topic_id_from_string,
    write_leader_epoch_checkpoint,
    write_partition_metadata,
)
from storage_core.formats.crc import crc32c
from storage_core.rebuild.plan import PartitionPlan, RestoreFile
from storage_core.rebuild.state import fsync_dir
from storage_core.remote.store_api import ObjectStore

CHUNK = 4 << 20
TMP_SUFFIX = ".tierkeeper-tmp"
Progress = Callable[[int], None]


@dataclass(frozen=True)
class RestoreProgress:
    """Where a restore reports how far it is (a progress bar, a rate limit)."""

    advanced: Progress | None = None
    """Called with each chunk's size as it arrives (from worker threads, serialised)."""
    started: Progress | None = None
    """Learns the number of bytes still to download once the staged dirs are reconciled."""


NO_PROGRESS = RestoreProgress()


@dataclass
class RestoreResult:
    downloaded_files: int = 0
    downloaded_bytes: int = 0
    kept_files: int = 0
    removed_files: int = 0


def reconcile_dir(pdir: Path, plan: PartitionPlan) -> tuple[list[RestoreFile], int, int]:
    """Make ``pdir`` a subset of what ``plan`` wants: returns (missing files, kept, removed)."""
    wanted = {f.name: f for f in plan.files}
    kept = removed = 0
    present: set[str] = set()
    with os.scandir(pdir) as entries:
        for entry in entries:
            want = wanted.get(entry.name)
            if (
                want is not None
                and entry.is_file(follow_symlinks=False)
                and entry.stat().st_size == want.size
            ):
                present.add(entry.name)
                kept += 1
            elif entry.name in (PARTITION_METADATA, LEADER_EPOCH_CHECKPOINT):
                continue  # rewritten from the plan at the end
            else:
                path = Path(entry.path)
                shutil.rmtree(path) if entry.is_dir(follow_symlinks=False) else path.unlink()
                removed += 1
    return [f for f in plan.files if f.name not in present], kept, removed


def download(store: ObjectStore, item: RestoreFile, target: Path, progress: Progress) -> int:
    """Stream one remote object to ``target`` (via a temporary name); returns its size."""
    tmp = target.with_name(target.name + TMP_SUFFIX)
    check = _Check(item)
    position = 0
    try:
        with open(tmp, "wb") as out:
            while position < item.size:
                chunk = store.get_range(item.key, position, min(position + CHUNK, item.size))
                if not chunk:
                    raise CorruptDataError(
                        f"remote object ended after {position} of {item.size} bytes", path=item.key
                    )
                out.write(chunk)
                check.feed(chunk)
                position += len(chunk)
                progress(len(chunk))
                fault_point("rebuild.chunk.written")
            out.flush()
            os.fsync(out.fileno())
        check.finish()
    except CorruptDataError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, target)
    fault_point("rebuild.file.restored")
    return item.size


class _Check:
    """Checks a download against what was recorded when it was tiered: the whole object's CRC-32C, or for
    a ``.log`` its batch chain (every batch's CRC as it arrives, then the chain)."""

    def __init__(self, item: RestoreFile) -> None:
        self._item = item
        self._crc = 0
        self._batches = BatchChainCheck(path=item.key) if item.batch_chain_crc32c is not None else None

    def feed(self, chunk: bytes) -> None:
        if self._batches is not None:
            self._batches.feed(chunk)
        if self._item.crc32c is not None:
            self._crc = crc32c(chunk, self._crc)

    def finish(self) -> None:
        item = self._item
        if self._batches is not None:
            self._batches.finish(item.batch_chain_crc32c)
        if item.crc32c is not None and self._crc != item.crc32c:
            raise CorruptDataError(
                f"CRC-32C {self._crc:#010x} of the download differs from the {item.crc32c:#010x} "
                "recorded when it was tiered",
                path=item.key,
            )


def restore(
    plans: Sequence[PartitionPlan],
    staging_dir: Callable[[str], Path],
    store: ObjectStore,
    *,
    parallelism: int,
    progress: RestoreProgress = NO_PROGRESS,
) -> RestoreResult:
    """Bring every planned partition's staged directory to exactly what its plan describes."""
    result = RestoreResult()
    jobs: list[tuple[RestoreFile, Path]] = []
    dirs: dict[str, Path] = {}
    for plan in plans:
        pdir = staging_dir(plan.dir_name)
        dirs[plan.dir_name] = pdir
        missing, kept, removed = reconcile_dir(pdir, plan)
        result.kept_files += kept
        result.removed_files += removed
        jobs.extend((f, pdir / f.name) for f in missing)
    if progress.started is not None:
        progress.started(sum(f.size for f, _ in jobs))
    # Largest first: the long downloads start early, the small ones fill the gaps at the end.
    jobs.sort(key=lambda job: job[0].size, reverse=True)
    lock = threading.Lock()
    report = progress.advanced or (lambda _n: None)

    def tick(n: int) -> None:
        with lock:
            report(n)

    with ThreadPoolExecutor(max_workers=max(1, parallelism), thread_name_prefix="tierkeeper-rebuild") as pool:
        futures = [pool.submit(download, store, f, target, tick) for f, target in jobs]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for fut in pending:
            fut.cancel()
        failures = [f.exception() for f in futures if f.done() and not f.cancelled() and f.exception()]
    if failures:
        first = failures[0]
        if isinstance(first, TierkeeperError):
            raise first
        raise TierkeeperError(f"download failed: {type(first).__name__}: {first}") from first
    for fut in done:
        result.downloaded_bytes += fut.result()
        result.downloaded_files += 1
    for plan in plans:
        pdir = dirs[plan.dir_name]
        write_partition_metadata(pdir / PARTITION_METADATA, topic_id_from_string(plan.topic_id))
        write_leader_epoch_checkpoint(pdir / LEADER_EPOCH_CHECKPOINT, plan.leader_epochs)
        fsync_dir(pdir)
    return result
