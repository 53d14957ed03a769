"""``tierkeeper scrub`` as a Spark job: one task per topic-partition (remote/scrub.py does the checking,
retention/quarantine.py the optional quarantine). One writer per partition: a task is the only one
touching its partition's markers in a run."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from storage_core.remote.catalog import list_partitions, list_topics
from storage_core.remote.layout import RemoteLayout, TopicPartitionId
from storage_core.remote.scrub import ScrubResult, scrub_partition
from storage_core.retention.quarantine import quarantine
from storage_core.spark.options import StorageSpec


@dataclass(frozen=True)
class ScrubTask:
    storage: StorageSpec
    tp: TopicPartitionId
    quarantine: bool = False
    now_ms: int = 0


def _scrub(task: ScrubTask) -> ScrubResult:
    store = task.storage.open()
    result = scrub_partition(store, task.tp)
    if not task.quarantine:
        return result
    held = quarantine(store, task.tp, result.damage, task.now_ms)
    return dataclasses.replace(result, quarantined=tuple(sorted({*result.quarantined, *held})))


def run_scrub(
    spark: Any, storage: StorageSpec, topic: str | None = None, *, quarantine_damage: bool = False
) -> list[ScrubResult]:
    """Scrub every partition (of ``topic``); with ``quarantine_damage``, quarantine damaged segments."""
    store = storage.open()
    layout = RemoteLayout(store.root)
    tasks = [
        ScrubTask(storage, tp, quarantine_damage, int(time.time() * 1000))
        for name, topic_id in list_topics(store, layout)
        if topic is None or name == topic
        for tp in list_partitions(store, layout, name, topic_id)
    ]
    if not tasks:
        return []
    results: list[ScrubResult] = spark.sparkContext.parallelize(tasks, len(tasks)).map(_scrub).collect()
    return sorted(results, key=lambda r: (r.topic, r.partition))
