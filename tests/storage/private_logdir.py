"""A private copy of some partitions of a real broker's log dir, for tests that damage or kill things."""

from __future__ import annotations

import shutil
from pathlib import Path

from storage_core.formats.checkpoints import REPLICATION_OFFSET_CHECKPOINT


def copy_partitions(broker_log_dir: Path, topics: list[str], target: Path) -> Path:
    """Copy the named topics' partition dirs and the high-watermark checkpoint into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in broker_log_dir.iterdir():
        topic = entry.name.rpartition("-")[0]
        if entry.is_dir() and topic in topics:
            shutil.copytree(entry, target / entry.name)
    shutil.copy2(broker_log_dir / REPLICATION_OFFSET_CHECKPOINT, target / REPLICATION_OFFSET_CHECKPOINT)
    return target
