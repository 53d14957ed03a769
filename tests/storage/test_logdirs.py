"""A broker's several log dirs (JBOD) read as one: each partition from the dir holding it, with that dir's
checkpoints; a partition live in two dirs refused; a partition Kafka is moving between dirs (a -future
directory) left out of a copy with one line, as is a partition no dir holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_core.adapters.store import RemoteStore
from storage_core.errors import ConfigError
from storage_core.formats.checkpoints import REPLICATION_OFFSET_CHECKPOINT, format_offset_checkpoint
from storage_core.formats.segment_files import TopicPartition
from storage_core.jobs.copy import CopyOptions, run_copy
from storage_core.logdir import LogDirs


def dirs_with(tmp_path: Path, layout: dict[str, list[str]]) -> list[Path]:
    out = []
    for name, entries in layout.items():
        d = tmp_path / name
        d.mkdir()
        for entry in entries:
            (d / entry).mkdir()
        out.append(d)
    return out


def test_partitions_come_from_every_dir_with_the_holders_checkpoints(tmp_path: Path) -> None:
    a, b = dirs_with(tmp_path, {"a": ["t-0", "t-2", "__cluster_metadata-0"], "b": ["t-1", "u-0"]})
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    # a still lists t-1 from before Kafka moved it to b: b's entry is the one that counts.
    (a / REPLICATION_OFFSET_CHECKPOINT).write_text(format_offset_checkpoint({t0: 10, t1: 99}))
    (b / REPLICATION_OFFSET_CHECKPOINT).write_text(format_offset_checkpoint({t1: 20}))
    dirs = LogDirs([a, b])
    assert [str(p.tp) for p in dirs.partitions()] == ["t-0", "t-1", "t-2", "u-0"]
    assert [str(p.tp) for p in dirs.partitions({"t"})] == ["t-0", "t-1", "t-2"]
    assert dirs.dir_of(t1) is not None and dirs.dir_of(t1).path == b  # type: ignore[union-attr]
    assert dirs.dir_of(TopicPartition("t", 7)) is None
    assert dirs.checkpoints().high_watermarks == {t0: 10, t1: 20}


def test_a_partition_live_in_two_dirs_or_a_dir_named_twice_is_refused(tmp_path: Path) -> None:
    a, b = dirs_with(tmp_path, {"a": ["t-0"], "b": ["t-0"]})
    with pytest.raises(ConfigError, match=f"t-0: live in two log dirs \\({a} and {b}\\)"):
        LogDirs([a, b]).partitions()
    with pytest.raises(ConfigError, match="named twice"):
        LogDirs([a, a])


def test_copy_leaves_a_moving_partition_and_names_a_missing_one(tmp_path: Path) -> None:
    a, b = dirs_with(tmp_path, {"a": ["t-0"], "b": ["t-0.5b3c1f0e9a2d4c8b8f6e7d1a2b3c4d5e-future"]})
    assert LogDirs([a, b]).moving() == {TopicPartition("t", 0)}
    options = CopyOptions(
        log_dirs=(str(a), str(b)), remote_url=f"file://{tmp_path / 'remote'}", assignment=(("t", 0), ("t", 1))
    )
    report = run_copy(options, RemoteStore(options.remote_url))
    errors = {(r.topic, r.partition): r.error for r in report.partitions}
    assert errors == {
        ("t", 0): "t-0: being moved between log dirs (a -future directory); copied once the move is done",
        ("t", 1): f"t-1: no partition directory in {a}, {b}",
    }
    assert not (tmp_path / "remote").exists() or not any((tmp_path / "remote").iterdir())
