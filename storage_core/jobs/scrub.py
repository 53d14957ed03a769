"""``tierkeeper scrub`` as a Spark job: one task per topic-partition (remote/scrub.py does the checking)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage_core.remote.catalog import list_partitions, list_topics
from storage_core.remote.layout import RemoteLayout, TopicPartitionId
from storage_core.remote.scrub import ScrubResult, scrub_partition
from storage_core.spark.options import StorageSpec


@dataclass(frozen=True)
class ScrubTask:
    storage: StorageSpec
    tp: TopicPartitionId


def _scrub(task: ScrubTask) -> ScrubResult:
    return scrub_partition(task.storage.open(), task.tp)


def run_scrub(spark: Any, storage: StorageSpec, topic: str | None = None) -> list[ScrubResult]:
    store = storage.open()
    layout = RemoteLayout(store.root)
    tasks = [
        ScrubTask(storage, tp)
        for name, topic_id in list_topics(store, layout)
        if topic is None or name == topic
        for tp in list_partitions(store, layout, name, topic_id)
    ]
    if not tasks:
        return []
    results: list[ScrubResult] = spark.sparkContext.parallelize(tasks, len(tasks)).map(_scrub).collect()
    return sorted(results, key=lambda r: (r.topic, r.partition))
