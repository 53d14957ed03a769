"""spark.readStream.format("tierkeeper"): segments tiered after the query started arrive as new
micro-batches, a query restarted from its checkpoint writes every record exactly once, and
maxOffsetsPerTrigger bounds every batch (Trigger.AvailableNow included: one bounded batch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from storage.dataset import Dataset

from harness.kafka import KafkaCluster

from .conftest import StreamRun, Tier, copy_to


def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
    for i in range(first, first + count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode() * 20, partition=i % 2)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def _tiered_offsets(tier: Tier, topic: str) -> set[tuple[int, int]]:
    return {(p, o) for p in range(2) for o in range(0, tier.remote_end(topic, p) + 1)}


@pytest.mark.parametrize("tier_name", ["file", "s3"])
def test_stream_picks_up_new_segments_and_restarts_exactly_once(
    tk_spark: Any,
    spark_dataset: Dataset,
    kafka_broker: KafkaCluster,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    tier_name: str,
) -> None:
    tier: Tier = request.getfixturevalue(f"{tier_name}_tier")
    topic = f"spark-stream-{tier_name}"
    admin = AdminClient({"bootstrap.servers": spark_dataset.bootstrap})
    config = {"internal.segment.bytes": "32768", "retention.ms": "-1"}
    for fut in admin.create_topics([NewTopic(topic, 2, 1, config=config)]).values():
        fut.result(60)
    _produce(spark_dataset.bootstrap, topic, 0, 3000)
    copy_to(tier, spark_dataset, kafka_broker, [topic])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(limit: int | None = None, available_now: bool = False) -> StreamRun:
        stream = (
            tk_spark.readStream.format("tierkeeper")
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .option("manifestRefreshIntervalMs", "0")  # processAllAvailable right after each copy
        )
        for key, value in tier.df_options.items():
            stream = stream.option(key, value)
        if limit is not None:
            stream = stream.option("maxOffsetsPerTrigger", str(limit))
        writer = (
            stream.load()
            .select("partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
        )
        return StreamRun(lambda: (writer.trigger(availableNow=True) if available_now else writer).start())

    def batch_rows(run: StreamRun) -> list[int]:
        return [p["numInputRows"] for p in run.query.recentProgress if p["numInputRows"]]

    def written() -> list[tuple[int, int]]:
        rows = tk_spark.read.parquet(str(out)).collect()
        return [(r["partition"], r["offset"]) for r in rows]

    query = start()
    try:
        query.process_all_available()
        first = written()
        assert set(first) == _tiered_offsets(tier, topic)
        _produce(spark_dataset.bootstrap, topic, 3000, 3000)  # more segments roll and get tiered
        copy_to(tier, spark_dataset, kafka_broker, [topic])
        query.process_all_available()
    finally:
        query.stop()
    second = written()
    assert len(second) == len(set(second)) and set(second) == _tiered_offsets(tier, topic)
    assert len(second) > len(first)
    # Stopped; more data is tiered; the restarted query resumes from its checkpoint, 500 offsets a batch.
    _produce(spark_dataset.bootstrap, topic, 6000, 2000)
    copy_to(tier, spark_dataset, kafka_broker, [topic])
    query = start(limit=500)
    try:
        query.process_all_available()
    finally:
        query.stop()
    third = written()
    assert len(third) == len(set(third)), "a record was written twice"
    assert set(third) == _tiered_offsets(tier, topic)
    assert len(third) > len(second)
    rows = batch_rows(query)
    assert sum(rows) == len(third) - len(second) and len(rows) >= 3 and max(rows) <= 500 + 2, rows
    # Trigger.AvailableNow with a limit: one bounded batch, then the run ends; the next run continues.
    _produce(spark_dataset.bootstrap, topic, 8000, 2000)
    copy_to(tier, spark_dataset, kafka_broker, [topic])
    query = start(limit=300, available_now=True)
    query.await_termination()
    fourth = written()
    assert len(fourth) == len(set(fourth)) and 0 < len(fourth) - len(third) <= 300 + 2
    assert batch_rows(query) == [len(fourth) - len(third)]
