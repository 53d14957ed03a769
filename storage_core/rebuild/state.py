"""The rebuild's footprint in the log dir, and the crash-safe steps that move it from empty to whole.

While data is being restored, two guards make Kafka refuse the log dir, so a broker started on a
half-restored dir fails loudly instead of serving a partial log:

- the staging directory ``tierkeeper-rebuild.staging`` receives every partition directory; its name is
  not ``<topic>-<partition>``, and Kafka's log loading aborts on such a directory (any log dir);
- ``meta.properties`` is renamed to ``meta.properties.tierkeeper-rebuild``; a KRaft broker refuses a
  metadata log dir without it (the single-log-dir case). It is renamed, never deleted or rewritten.

The marker ``tierkeeper-rebuild.json`` records the phase. Steps, each durable before the next:
  begin:   mkdir staging -> meta aside -> marker(restoring)
  restore: files downloaded into staging under temporary names, fsynced, renamed
  install: marker(installing, partitions) -> move each partition dir into place -> remove staging
           -> meta back -> marker(complete)
A crash anywhere leaves a state ``classify`` recognises; the next run resumes from it. The complete
marker stays, so running again on a rebuilt dir does nothing.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from storage_core.errors import ConfigError
from storage_core.formats.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
    write_atomically,
)
from storage_core.formats.segment_files import (
    CLUSTER_METADATA_TOPIC,
    TopicPartition,
    parse_partition_dir_name,
)
from storage_core.rebuild.plan import RebuildRefused

STAGING_DIR = "tierkeeper-rebuild.staging"
MARKER = "tierkeeper-rebuild.json"
META = "meta.properties"
META_ASIDE = "meta.properties.tierkeeper-rebuild"
LOCK = ".lock"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
OFFSET_CHECKPOINTS = (
    REPLICATION_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT,
)
# What a freshly formatted (and possibly once started) empty log dir may hold besides meta.properties.
_FRESH_FILES = {META, LOCK, CLEAN_SHUTDOWN, "bootstrap.checkpoint", *OFFSET_CHECKPOINTS}
_FRESH_DIRS = {f"{CLUSTER_METADATA_TOPIC}-0", "remote-log-index-cache"}


class Phase(str, Enum):
    RESTORING = "restoring"
    INSTALLING = "installing"
    COMPLETE = "complete"


class PartitionSummary(BaseModel):
    """What was (or will be) restored for one partition; kept in the marker and printed by the CLI."""

    topic: str
    partition: int
    topic_id: str
    segments: int
    bytes: int
    restored_start: int | None
    restored_end: int | None
    leader_end: int
    expected_tail: int
    note: str = ""

    @property
    def dir_name(self) -> str:
        return str(TopicPartition(self.topic, self.partition))


class RebuildMarker(BaseModel):
    version: int = 1
    broker_id: int
    phase: Phase
    started_ms: int
    updated_ms: int
    partitions: list[PartitionSummary] = Field(default_factory=list)


class Situation(str, Enum):
    FRESH = "fresh"
    INTERRUPTED = "interrupted"
    """A restore started and did not reach the install phase: re-plan and resume it."""
    INSTALLING = "installing"
    COMPLETE = "complete"


@dataclass(frozen=True)
class Observed:
    marker: RebuildMarker | None
    staging: bool
    meta: bool
    aside: bool


def classify(seen: Observed, path: Path, *, unformatted_ok: bool = False) -> Situation:
    """Which step a log dir is at; refuses combinations no sequence of our steps can produce.

    ``unformatted_ok``: a dir without ``meta.properties`` may be restored too (the init container of a pod
    whose broker formats its storage at start, as Strimzi's does with ``kafka-storage format -g``, which
    Kafka 4.1 accepts on a non-empty dir); only the staging guard then protects it."""
    if seen.meta and seen.aside:
        raise RebuildRefused(f"both {META} and {META_ASIDE} exist in {path}; keep only the new broker's own")
    if not seen.meta and not seen.aside and not unformatted_ok:
        raise RebuildRefused(
            f"no {META} in {path}: format the new broker's log dir (kafka-storage format) first"
        )
    if seen.marker is None:
        return Situation.INTERRUPTED if seen.staging or seen.aside else Situation.FRESH
    if seen.marker.phase is Phase.COMPLETE:
        if seen.staging or seen.aside:
            raise RebuildRefused(f"{path} is marked rebuilt but still holds {STAGING_DIR} or {META_ASIDE}")
        return Situation.COMPLETE
    if seen.marker.phase is Phase.INSTALLING:
        return Situation.INSTALLING
    return Situation.INTERRUPTED


def now_ms() -> int:
    return int(time.time() * 1000)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_properties(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


class RebuildDir:
    """One broker log dir being rebuilt."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise ConfigError(f"log dir {self.path} does not exist or is not a directory")
        self.staging = self.path / STAGING_DIR
        self.marker_path = self.path / MARKER

    # ---- looking ------------------------------------------------------------------------------
    def observe(self) -> Observed:
        return Observed(
            self.read_marker(),
            self.staging.is_dir(),
            (self.path / META).is_file(),
            (self.path / META_ASIDE).is_file(),
        )

    def read_marker(self) -> RebuildMarker | None:
        try:
            return RebuildMarker.model_validate_json(self.marker_path.read_bytes())
        except FileNotFoundError:
            return None
        except ValidationError as exc:
            raise RebuildRefused(f"unreadable {self.marker_path}: {exc.errors()[0]['msg']}") from exc

    def check_identity(self, broker_id: int) -> None:
        """The log dir must belong to the broker being rebuilt (its own meta.properties, perhaps aside;
        an unformatted dir has none and is checked against the marker alone)."""
        meta = self.path / META if (self.path / META).is_file() else self.path / META_ASIDE
        if meta.is_file():
            node = read_properties(meta).get("node.id")
            if node != str(broker_id):
                raise RebuildRefused(f"{meta} belongs to node.id {node}, not broker {broker_id}")
        marker = self.read_marker()
        if marker is not None and marker.broker_id != broker_id:
            raise RebuildRefused(
                f"{self.marker_path} records a rebuild of broker {marker.broker_id}, not {broker_id}"
            )

    def unexpected_entries(self) -> list[str]:
        """What the dir holds beyond what formatting (and perhaps one start) leaves behind."""
        unexpected = []
        for entry in sorted(os.listdir(self.path)):
            full = self.path / entry
            if full.is_dir():
                if entry not in _FRESH_DIRS:
                    unexpected.append(entry + "/")
            elif entry not in _FRESH_FILES:
                unexpected.append(entry)
        return unexpected

    def check_fresh(self, restoring: set[TopicPartition]) -> None:
        """An empty log dir: nothing but what formatting (and perhaps one start) leaves behind."""
        unexpected = self.unexpected_entries()
        if unexpected:
            raise RebuildRefused(
                f"log dir {self.path} is not empty ({', '.join(unexpected[:5])}"
                f"{', ...' if len(unexpected) > 5 else ''}); rebuild prepares only the empty "
                "log dir of a replaced broker"
            )
        for name in OFFSET_CHECKPOINTS:
            if (self.path / name).is_file():
                stale = sorted(set(read_offset_checkpoint(self.path / name)) & restoring)
                if stale:
                    raise RebuildRefused(
                        f"{self.path / name} already has an entry for {stale[0]}; remove the "
                        "stale checkpoint files of the old log dir first"
                    )

    # ---- the lock Kafka itself takes ----------------------------------------------------------
    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold ``.lock`` the way a running broker does (a POSIX record lock, which the JVM's FileLock also
        uses): a broker started meanwhile fails to lock the dir, and a running broker makes us refuse."""
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EAGAIN):
                    raise RebuildRefused(
                        f"{self.path / LOCK} is locked: a broker (or another rebuild) is using "
                        "this log dir; stop it first"
                    ) from exc
                raise
            yield
        finally:
            os.close(fd)

    def is_locked_by_other(self) -> bool:
        lock = self.path / LOCK
        if not lock.exists():
            return False
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(fd, fcntl.LOCK_UN)
            return False
        except OSError:
            return True
        finally:
            os.close(fd)

    # ---- the steps ----------------------------------------------------------------------------
    def arm_guards(self, broker_id: int) -> None:
        """Staging dir and meta aside (in that order), then the restoring marker; idempotent."""
        created = not self.staging.is_dir()
        self.staging.mkdir(exist_ok=True)
        if (self.path / META).is_file():
            os.rename(self.path / META, self.path / META_ASIDE)
            created = True
        if created:
            fsync_dir(self.path)
        marker = self.read_marker()
        if marker is None:
            stamp = now_ms()
            self.write_marker(
                RebuildMarker(broker_id=broker_id, phase=Phase.RESTORING, started_ms=stamp, updated_ms=stamp)
            )
        (self.path / (MARKER + ".tmp")).unlink(missing_ok=True)

    def prune_staging(self, keep: set[str]) -> int:
        """Remove staged partition dirs the current plan no longer restores; returns how many."""
        removed = 0
        for entry in os.listdir(self.staging):
            if entry not in keep:
                full = self.staging / entry
                shutil.rmtree(full) if full.is_dir() else full.unlink()
                removed += 1
        return removed

    def write_marker(self, marker: RebuildMarker) -> None:
        write_atomically(self.marker_path, marker.model_dump_json(indent=2))

    def mark_installing(self, partitions: list[PartitionSummary]) -> RebuildMarker:
        marker = self.read_marker()
        if marker is None:
            raise RebuildRefused(f"{self.marker_path} vanished during the restore")
        updated = marker.model_copy(
            update={"phase": Phase.INSTALLING, "updated_ms": now_ms(), "partitions": partitions}
        )
        self.write_marker(updated)
        return updated

    def install(self, marker: RebuildMarker) -> RebuildMarker:
        """Move the staged partitions into the log dir, drop both guards, mark the dir complete."""
        for summary in marker.partitions:
            src, dst = self.staging / summary.dir_name, self.path / summary.dir_name
            if src.is_dir():
                if dst.exists():
                    raise RebuildRefused(
                        f"{dst} exists outside the staging area; was a broker started on this "
                        "log dir? Refusing to overwrite it"
                    )
                os.rename(src, dst)
            elif not dst.is_dir() and summary.segments:
                raise RebuildRefused(f"staged partition {summary.dir_name} is missing from {self.staging}")
        fsync_dir(self.path)
        if self.staging.exists():
            shutil.rmtree(self.staging)
        # A clean-shutdown marker would make Kafka skip recovery and trust the restored files unchecked.
        (self.path / CLEAN_SHUTDOWN).unlink(missing_ok=True)
        fsync_dir(self.path)
        if (self.path / META_ASIDE).is_file():
            os.rename(self.path / META_ASIDE, self.path / META)
            fsync_dir(self.path)
        done = marker.model_copy(update={"phase": Phase.COMPLETE, "updated_ms": now_ms()})
        self.write_marker(done)
        return done

    def partition_dir(self, name: str) -> Path:
        """A staged partition directory, created on first use."""
        if parse_partition_dir_name(name) is None:
            raise RebuildRefused(f"{name!r} is not a partition directory name")
        pdir = self.staging / name
        pdir.mkdir(exist_ok=True)
        return pdir
