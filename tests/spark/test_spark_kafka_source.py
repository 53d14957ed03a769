"""Spark's own Kafka source (spark-sql-kafka-0-10 of the pinned Spark, resolved from Maven Central by
the harness) reading the same topic from the broker: the same schema, and the example's union of remote
history with live Kafka data, split at the tiering boundary, holds every offset once and equals the
Kafka source's own full read."""

from __future__ import annotations

import importlib.util
from typing import Any

from storage.dataset import Dataset

from harness.paths import REPO_ROOT

from .conftest import Tier


def _example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "spark_backfill", REPO_ROOT / "examples" / "spark_backfill.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kafka(spark: Any, bootstrap: str, topic: str) -> Any:
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (
            r["partition"],
            r["offset"],
            r["timestamp"],
            r["timestampType"],
            r["topic"],
            None if r["key"] is None else bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"]),
            None if r["headers"] is None else tuple((h["key"], h["value"]) for h in r["headers"]),
        )
        for r in df.collect()
    )


def test_schema_equals_the_kafka_sources(tk_spark: Any, spark_dataset: Dataset, file_tier: Tier) -> None:
    topic = spark_dataset.codec_topics[3]
    for headers in ("false", "true"):
        ours = tk_spark.read.format("tierkeeper").options(
            **file_tier.df_options, topic=topic, includeHeaders=headers
        )
        theirs = _kafka(tk_spark, spark_dataset.bootstrap, topic).drop(
            *([] if headers == "true" else ["headers"])
        )
        assert ours.load().schema == theirs.schema


def test_union_split_at_the_tiering_boundary_has_every_offset_once(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier
) -> None:
    topic = spark_dataset.codec_topics[1]
    union = _example().history_and_live(tk_spark, topic, spark_dataset.bootstrap, file_tier.df_options)
    got = _rows(union)
    keys = [(p, o) for p, o, *_ in got]
    assert len(keys) == len(set(keys)), "an offset was read twice"
    kafka_rows = _rows(_kafka(tk_spark, spark_dataset.bootstrap, topic))
    assert got == kafka_rows
    # Both halves contributed: the remote tier served history, the broker the untiered tail.
    for p in range(spark_dataset.partitions[topic]):
        boundary = file_tier.remote_end(topic, p) + 1
        assert any(q == p and o < boundary for q, o in keys)
        assert any(q == p and o >= boundary for q, o in keys)
