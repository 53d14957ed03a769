"""A private copy of some partitions of a real broker's log dir, for tests that damage or kill things."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from storage_core.formats.checkpoints import REPLICATION_OFFSET_CHECKPOINT
from storage_core.logdir import LogDir
from storage_core.tiering.plan import plan_copies


def copy_partitions(broker_log_dir: Path, topics: list[str], target: Path) -> Path:
    """Copy the named topics' partition dirs and the high-watermark checkpoint into ``target``.

    Waits first until the broker's checkpointed high watermark covers every rolled segment of them: a
    copy without --bootstrap-servers trusts that checkpoint, which the broker writes every 5 s, and tests
    expect every rolled segment to be eligible.
    """
    wait_for_checkpoint(broker_log_dir, topics)
    target.mkdir(parents=True, exist_ok=True)
    for entry in broker_log_dir.iterdir():
        topic = entry.name.rpartition("-")[0]
        if entry.is_dir() and topic in topics:
            shutil.copytree(entry, target / entry.name)
    shutil.copy2(broker_log_dir / REPLICATION_OFFSET_CHECKPOINT, target / REPLICATION_OFFSET_CHECKPOINT)
    return target


def rolled_log_bytes(log_dir: Path, topics: list[str]) -> int:
    """.log bytes of every rolled (not active) segment of ``topics``."""
    return sum(s.log_size for p in LogDir(log_dir).partitions(set(topics)) for s in p.segments()[:-1])


def eligible_log_bytes(log_dir: Path, topics: list[str]) -> int:
    """.log bytes of the segments a copy without --bootstrap-servers would tier: the copy planner's own
    decision against the checkpointed high watermark, with nothing tiered yet."""
    logs = LogDir(log_dir)
    watermarks = logs.checkpoints().high_watermarks
    total = 0
    for p in logs.partitions(set(topics)):
        segments = p.segments()
        decision = plan_copies([s.base_offset for s in segments], watermarks.get(p.tp, 0), None)
        eligible = {span.base_offset for span in decision.eligible}
        total += sum(s.log_size for s in segments if s.base_offset in eligible)
    return total


def wait_for_checkpoint(broker_log_dir: Path, topics: list[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while eligible_log_bytes(broker_log_dir, topics) < rolled_log_bytes(broker_log_dir, topics):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the broker's high-watermark checkpoint never covered the rolled segments of "
                f"{topics} within {timeout:.0f} s"
            )
        time.sleep(0.5)
