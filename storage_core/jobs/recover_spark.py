"""``tierkeeper recover --engine spark``: the restore's partitions as tasks of a Spark job.

Each task restores one partition exactly as the in-process engine does (``recover.restore_one``): its
own producer with the partition's transactional id, its own reader of the remote tier. Only the
restore runs on Spark; observing, planning and creating the topic stay in the driver. A rate limit is
split evenly between the tasks that run at once (each gets ``rate / slots``), since tasks share no
memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage_core.errors import TierkeeperError
from storage_core.jobs.recover import PartitionRestore, RestoreOutcome, RestoreRunner, restore_one
from storage_core.throttle import RateLimiter


@dataclass(frozen=True)
class SparkRestoreTask:
    job: PartitionRestore
    bytes_per_second: int | None


def _restore_task(task: SparkRestoreTask) -> tuple[RestoreOutcome | None, str | None]:
    limiter = RateLimiter(task.bytes_per_second) if task.bytes_per_second else None
    try:
        return restore_one(task.job, limiter), None
    except TierkeeperError as exc:
        # Reported by the driver as one line; the other partitions' committed progress stays.
        return None, f"partition {task.job.summary.partition}: {exc}"


def spark_runner(spark: Callable[[], Any], bytes_per_second: int | None) -> RestoreRunner:
    """A runner that restores every partition as one task of the session ``spark()`` returns (called
    only when there is something to restore, so ``--dry-run`` never starts Spark)."""

    def run(jobs: list[PartitionRestore]) -> list[RestoreOutcome]:
        if not jobs:
            return []
        context = spark().sparkContext
        slots = max(1, min(len(jobs), int(context.defaultParallelism)))
        per_task = max(1, bytes_per_second // slots) if bytes_per_second else None
        tasks = [SparkRestoreTask(job, per_task) for job in jobs]
        results: list[tuple[RestoreOutcome | None, str | None]] = (
            context.parallelize(tasks, len(tasks)).map(_restore_task).collect()
        )
        errors = [error for _, error in results if error is not None]
        if errors:
            more = f" (and {len(errors) - 1} more partitions)" if len(errors) > 1 else ""
            raise TierkeeperError(f"restore failed: {errors[0]}{more}; rerun to resume")
        return [outcome for outcome, _ in results if outcome is not None]

    return run
