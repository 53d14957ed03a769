"""spark.readStream.format("tierkeeper"): segments tiered after the query started arrive as new
micro-batches, and a query restarted from its checkpoint writes every record exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from storage.dataset import Dataset

from harness.kafka import KafkaCluster

from .conftest import Tier, copy_to


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

    def start() -> Any:
        stream = (
            tk_spark.readStream.format("tierkeeper")
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .option("manifestRefreshIntervalMs", "0")  # processAllAvailable right after each copy
        )
        for key, value in tier.df_options.items():
            stream = stream.option(key, value)
        return (
            stream.load()
            .select("partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    def written() -> list[tuple[int, int]]:
        rows = tk_spark.read.parquet(str(out)).collect()
        return [(r["partition"], r["offset"]) for r in rows]

    query = start()
    try:
        query.processAllAvailable()
        first = written()
        assert set(first) == _tiered_offsets(tier, topic)
        _produce(spark_dataset.bootstrap, topic, 3000, 3000)  # more segments roll and get tiered
        copy_to(tier, spark_dataset, kafka_broker, [topic])
        query.processAllAvailable()
    finally:
        query.stop()
    second = written()
    assert len(second) == len(set(second)) and set(second) == _tiered_offsets(tier, topic)
    assert len(second) > len(first)
    # Stopped; more data is tiered; the restarted query resumes from its checkpoint.
    _produce(spark_dataset.bootstrap, topic, 6000, 2000)
    copy_to(tier, spark_dataset, kafka_broker, [topic])
    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    third = written()
    assert len(third) == len(set(third)), "a record was written twice"
    assert set(third) == _tiered_offsets(tier, topic)
    assert len(third) > len(second)
