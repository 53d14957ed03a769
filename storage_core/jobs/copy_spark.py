"""``tierkeeper copy --engine spark``: the same per-partition copy (tiering.partition_copy), run as the tasks
of a local Spark session. Copy reads the broker's own log dir, so the session is always local to this
node (``local[parallelism]``), never a cluster; one task per partition keeps one writer per partition.

A rate limit is split evenly between the task slots (each task gets ``rate / parallelism``), since
tasks share no memory; at most ``parallelism`` tasks run at once, so the sum stays within the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage_core.tiering.partition_copy import PartitionCopyResult, copy_partition
from storage_core.tiering.plan import CopyTask


@dataclass(frozen=True)
class SparkCopyTask:
    task: CopyTask
    fsync: bool
    bytes_per_second: int | None


def _copy_one(job: SparkCopyTask) -> PartitionCopyResult:
    from storage_core.adapters.store import RemoteStore
    from storage_core.throttle import RateLimiter, limited

    store = RemoteStore(job.task.remote_url, job.task.storage_options, fsync=job.fsync)
    limiter = RateLimiter(job.bytes_per_second) if job.bytes_per_second else None
    return copy_partition(job.task, store, limited(lambda _n: None, limiter))


def spark_master(parallelism: int) -> str:
    return f"local[{parallelism}]"


def run_copy_spark(
    spark: Any, tasks: list[CopyTask], *, parallelism: int, fsync: bool, bytes_per_second: int | None
) -> list[PartitionCopyResult]:
    if not tasks:
        return []
    per_task = max(1, bytes_per_second // parallelism) if bytes_per_second else None
    jobs = [SparkCopyTask(t, fsync, per_task) for t in tasks]
    results: list[PartitionCopyResult] = (
        spark.sparkContext.parallelize(jobs, len(jobs)).map(_copy_one).collect()
    )
    return results
