"""A remote tier made by ``tierkeeper copy`` from a log dir written here (no Kafka needed), and the ways
the tests damage it: a remote log index entry rewritten with a valid entry CRC but an rdi that is not
ours, pointer indexes overwritten, a segment byte flipped, a marker and a manifest that are not JSON, and
a marker that is not JSON in a partition whose manifest is gone (so the marker is what a reader reads)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from formats.formats_builders import Rec, build_batch

from storage_core.cli.main import main
from storage_core.formats.checkpoints import (
    REPLICATION_OFFSET_CHECKPOINT,
    write_offset_checkpoint,
    write_partition_metadata,
)
from storage_core.formats.remote_index import RemoteLogIndexEntry, iter_remote_log_index
from storage_core.formats.segment_files import TopicPartition
from storage_core.formats.source import bytes_fetcher

TOPIC = "orders"
RECORDS_PER_SEGMENT = 20


def write_log_dir(path: Path, segments: int = 3, topic: str = TOPIC) -> None:
    """``segments`` segments of ``topic``-0 (the last one active), high watermark at the end."""
    partition = path / f"{topic}-0"
    partition.mkdir(parents=True)
    write_partition_metadata(partition / "partition.metadata", uuid.uuid4())
    offset = 0
    for _ in range(segments):
        base, batches = offset, []
        for _ in range(RECORDS_PER_SEGMENT // 4):
            records = [Rec(i, 1_700_000_000_000 + offset + i, b"k", b"v" * 50) for i in range(4)]
            batches.append(build_batch(records, base_offset=offset))
            offset += 4
        (partition / f"{base:020d}.log").write_bytes(b"".join(batches))
        (partition / f"{base:020d}.index").write_bytes(b"")
        (partition / f"{base:020d}.timeindex").write_bytes(b"")
    write_offset_checkpoint(path / REPLICATION_OFFSET_CHECKPOINT, {TopicPartition(topic, 0): offset})


def first(remote: Path, suffix: str) -> Path:
    return sorted(remote.rglob(f"*{suffix}"))[0]


def rewrite_entry_with_foreign_rdi(remote: Path) -> None:
    """The first remoteLogIndex entry rewritten whole (a fresh, valid entry CRC) with an rdi that is not
    ``<object>@<position>``: only the object's CRC in its COPY_FINISHED marker can tell."""
    path = first(remote, ".remoteLogIndex")
    data = path.read_bytes()
    _, entry = next(iter_remote_log_index(bytes_fetcher(data)))
    rdi = b"\xff" * len(entry.rdi)  # same length: every other entry and pointer stays where it was
    damaged = RemoteLogIndexEntry(
        entry.first_offset,
        entry.last_offset,
        entry.first_timestamp,
        entry.last_timestamp,
        entry.data_length,
        rdi,
    ).encode()
    path.write_bytes(damaged + data[len(damaged) :])


def overwrite(suffix: str, data: bytes | None = None) -> Callable[[Path], None]:
    def damage(remote: Path) -> None:
        path = first(remote, suffix)
        path.write_bytes(data if data is not None else b"\x7f" * path.stat().st_size)

    return damage


def unreadable_marker_without_manifest(remote: Path) -> None:
    overwrite(".COPY_FINISHED.json", b"{not json")(remote)
    first(remote, "segments.manifest.json").unlink()


def flip_segment_byte(remote: Path) -> None:
    path = first(remote, ".log")
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "log-index-entry": rewrite_entry_with_foreign_rdi,
    "offset-index": overwrite(".remoteOffsetIndex"),
    "time-index": overwrite(".remoteTimeIndex"),
    "segment": flip_segment_byte,
    "marker": overwrite(".COPY_FINISHED.json", b"{not json"),
    "manifest": overwrite("segments.manifest.json", b"\x00garbage"),
    "marker-without-manifest": unreadable_marker_without_manifest,
}
MARKER_DAMAGE = ("marker", "marker-without-manifest")


def make_tier(tmp_path: Path, topic: str = TOPIC) -> Path:
    """A file:// tier of ``topic``-0 with two finished segments."""
    write_log_dir(tmp_path / "log-dir", topic=topic)
    remote = tmp_path / "remote"
    remote.mkdir()
    copied = main(
        ["copy", "--log-dir", str(tmp_path / "log-dir"), "--remote", f"file://{remote}", "--assume-tierable"]
    )
    assert copied == 0
    return remote
