"""Every reading command answers a damaged remote tier with one line naming the damage, never a traceback:
a remote log index entry rewritten with a valid entry CRC but an rdi that is not ours, pointer indexes
overwritten, a segment byte flipped, a marker and a manifest that are not JSON. The tier is made by
``tierkeeper copy`` from a log dir written here (no Kafka needed)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
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


def write_log_dir(path: Path, segments: int = 3) -> None:
    """``segments`` segments of ``TOPIC``-0 (the last one active), high watermark at the end."""
    partition = path / f"{TOPIC}-0"
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
    write_offset_checkpoint(path / REPLICATION_OFFSET_CHECKPOINT, {TopicPartition(TOPIC, 0): offset})


@pytest.fixture
def tier(tmp_path: Path) -> Path:
    write_log_dir(tmp_path / "log-dir")
    remote = tmp_path / "remote"
    remote.mkdir()
    assert (
        main(
            ["copy", "--log-dir", str(tmp_path / "log-dir"), "--remote", f"file://{remote}"]
            + ["--assume-tierable"]
        )
        == 0
    )
    return remote


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
}

COMMANDS: dict[str, list[str]] = {
    "read-offset": ["read", "--topic", TOPIC, "--partition", "0", "--from-offset", "3"],
    "read-timestamp": ["read", "--topic", TOPIC, "--partition", "0", "--from-timestamp", "1700000000003"],
    "read-arrow": ["read", "--topic", TOPIC, "--partition", "0", "--from-offset", "0", "--format", "arrow"],
    "ls": ["ls", "--topic", TOPIC],
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_damaged_tier_gets_one_line_from_every_reading_command(
    tier: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str, command: str
) -> None:
    DAMAGE[damage](tier)
    argv = [*COMMANDS[command], "--remote", f"file://{tier}"]
    if "--format" in argv:
        argv += ["--output", str(tmp_path / "out.arrow")]
    capsys.readouterr()
    code = main(argv)  # a traceback would propagate from here and fail the test
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert all(line.startswith(f"tierkeeper {argv[0]}: ") for line in lines), err
    assert code == 0 or len(lines) == 1, err


@pytest.mark.parametrize("damage", ["log-index-entry", "offset-index", "time-index"])
def test_a_damaged_index_is_named_with_its_object_and_offset(
    tier: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    DAMAGE[damage](tier)
    command = "read-timestamp" if damage == "time-index" else "read-offset"
    capsys.readouterr()
    assert main([*COMMANDS[command], "--remote", f"file://{tier}"]) == 1
    err = capsys.readouterr().err
    assert "does not match its COPY_FINISHED marker" in err, err
    assert "offset=0" in err and ".remote" in err, err
