"""``tierkeeper copy --engine spark`` (partitions as tasks of a local Spark session) gives the same result
as the in-process engine: the same summary per partition and byte-identical tiered segments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from storage.dataset import Dataset

from harness.kafka import KafkaCluster
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.store import RemoteStore
from storage_core.remote.catalog import list_partitions, list_topics
from storage_core.remote.layout import RemoteLayout, SegmentObject
from storage_core.remote.reader import RemoteReader


def _copy(
    engine: str, target: Path, data: Dataset, broker: KafkaCluster, topics: list[str]
) -> dict[str, Any]:
    proc = run_cli(
        "copy",
        "--log-dir",
        str(broker.log_dir(1)),
        "--bootstrap-servers",
        data.bootstrap,
        "--engine",
        engine,
        "--parallelism",
        "2",
        "--json",
        *[arg for t in topics for arg in ("--topic", t)],
        "--remote",
        f"file://{target}",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def _segments(target: Path) -> dict[tuple[str, int, int], bytes]:
    store = RemoteStore(f"file://{target}")
    layout = RemoteLayout(store.root)
    out = {}
    with RemoteReader(store) as reader:
        for topic, topic_id in list_topics(store, layout):
            for tp in list_partitions(store, layout, topic, topic_id):
                for meta in reader.manifest(tp, refresh=True).segments:
                    key = layout.object_key(tp, meta.base_offset, meta.segment_id, SegmentObject.LOG)
                    out[(topic, tp.partition, meta.base_offset)] = store.get(key)
    return out


def test_spark_engine_copies_exactly_what_the_threads_engine_copies(
    spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topics = [spark_dataset.txn_topic, spark_dataset.codec_topics[1], spark_dataset.open_txn_topic]
    threads = _copy("threads", tmp_path / "threads", spark_dataset, kafka_broker, topics)
    spark = _copy("spark", tmp_path / "spark", spark_dataset, kafka_broker, topics)

    def per_partition(summary: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
        return {(p["topic"], p["partition"]): p for p in summary["partitions"]}

    assert per_partition(spark) == per_partition(threads)
    assert spark["copied_segments"] == threads["copied_segments"] > 0
    segments = _segments(tmp_path / "threads")
    assert segments and _segments(tmp_path / "spark") == segments
