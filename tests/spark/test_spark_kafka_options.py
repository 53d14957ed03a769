"""The Kafka source's ending-by-timestamp options, the by-timestamp strategy, ``subscribe``,
``minPartitions`` and ``maxRecordsPerPartition`` on real tiered data: the rows are exactly what a real
consumer's read says they must be, with the Kafka source's precedence and no-match rules."""

from __future__ import annotations

import json
from typing import Any

import pytest
from storage.dataset import Dataset

from storage_core.errors import ConfigError
from storage_core.spark.options import parse_options

from .conftest import Tier
from .test_spark_datasource import _consumer_rows, _load, _rows


def _first_at(rows: list[tuple[Any, ...]], partition: int, ts: int) -> int | None:
    """ListOffsets: the first offset (offset order) whose record timestamp is >= ts."""
    return next((o for p, o, t, *_ in rows if p == partition and t >= ts), None)


def test_ending_timestamps_end_where_list_offsets_says(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier
) -> None:
    topic = spark_dataset.codec_topics[2]
    everything = _consumer_rows(spark_dataset, file_tier, topic, "read_committed")
    stamps = sorted({r[2] for r in everything})
    lo, hi = stamps[len(stamps) // 5], stamps[(3 * len(stamps)) // 4]

    def window(start_ts: int | None, end_ts: dict[int, int | None]) -> list[tuple[int, int]]:
        out = []
        for p in range(2):
            first = 0 if start_ts is None else _first_at(everything, p, start_ts)
            end = _first_at(everything, p, end_ts[p]) if end_ts[p] is not None else None
            out += [
                (q, o)
                for q, o, *_ in everything
                if q == p and first is not None and o >= first and (end is None or o < end)
            ]
        return out

    df = _load(tk_spark, file_tier, topic, startingTimestamp=str(lo), endingTimestamp=str(hi))
    assert [(p, o) for p, o, *_ in _rows(df)] == window(lo, {0: hi, 1: hi})

    # Per partition; an end timestamp newer than every tiered record ends at the remote end (latest).
    after_all = stamps[-1] + 1
    by_ts = json.dumps({topic: {"0": hi, "1": after_all}})
    df = _load(tk_spark, file_tier, topic, endingOffsetsByTimestamp=by_ts)
    assert [(p, o) for p, o, *_ in _rows(df)] == window(None, {0: hi, 1: None})

    # The global timestamp wins over the per-partition one and over the offsets (the Kafka source's order).
    df = _load(
        tk_spark, file_tier, topic,
        endingTimestamp=str(hi), endingOffsetsByTimestamp=by_ts, endingOffsets=json.dumps({topic: {"0": 5}}),
    )  # fmt: skip
    assert [(p, o) for p, o, *_ in _rows(df)] == window(None, {0: hi, 1: hi})


def test_a_start_timestamp_past_the_tier_fails_unless_the_strategy_says_latest(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier
) -> None:
    topic = spark_dataset.codec_topics[2]
    everything = _consumer_rows(spark_dataset, file_tier, topic, "read_committed")
    after_all = max(r[2] for r in everything) + 1
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy=latest"):
        _load(tk_spark, file_tier, topic, startingTimestamp=str(after_all)).count()
    df = _load(
        tk_spark,
        file_tier,
        topic,
        startingTimestamp=str(after_all),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert df.count() == 0
    # Per-partition timestamps must name every tiered partition, as in the Kafka source.
    with pytest.raises(Exception, match="partition 1 is missing"):
        _load(tk_spark, file_tier, topic, startingOffsetsByTimestamp=json.dumps({topic: {"0": 1}})).count()


def test_subscribe_min_partitions_and_max_records_per_partition(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier
) -> None:
    topic = spark_dataset.codec_topics[0]
    everything = _consumer_rows(spark_dataset, file_tier, topic, "read_committed")
    offsets = [(p, o) for p, o, *_ in everything]
    base = _load(tk_spark, file_tier, topic)
    options = dict(file_tier.df_options)

    subscribed = tk_spark.read.format("tierkeeper").options(**options, subscribe=topic).load()
    assert [(p, o) for p, o, *_ in _rows(subscribed)] == offsets

    n = base.rdd.getNumPartitions()
    more = _load(tk_spark, file_tier, topic, minPartitions=str(4 * n))
    assert more.rdd.getNumPartitions() > n
    assert [(p, o) for p, o, *_ in _rows(more)] == offsets

    capped = _load(tk_spark, file_tier, topic, maxRecordsPerPartition="300")
    per_split = capped.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
    assert max(per_split) <= 300 and sum(per_split) == len(offsets)
    assert [(p, o) for p, o, *_ in _rows(capped)] == offsets


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "t", "maxOffsetsPerTrigger": "10"}, "streaming queries only"),
        ({"topic": "t", "minOffsetsPerTrigger": "10"}, "no admission control (maxOffsetsPerTrigger works)"),
        ({"topic": "t", "kafka.bootstrap.servers": "b:9092"}, "not from brokers"),
        ({"topic": "t", "startingOffsetsByTimestampStrategy": "oldest"}, "error or latest"),
        ({"topic": "t", "minPartitions": "0"}, "minPartitions must be >= 1"),
        ({"topic": "t", "maxRecordsPerPartition": "x"}, "maxRecordsPerPartition must be an integer"),
        ({"topic": "t", "endingTimestamp": "soon"}, "endingTimestamp"),
    ],
)
def test_kafka_options_that_cannot_apply_are_one_line_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_options({"remote": "memory://x", "storage.secret": "s3cr3t", **options})
    assert message in str(err.value) and "\n" not in str(err.value)
    assert "s3cr3t" not in str(err.value)


@pytest.mark.parametrize("name", ["endingTimestamp", "endingOffsetsByTimestamp"])
def test_ending_timestamps_are_for_batch_queries_only(name: str) -> None:
    with pytest.raises(ConfigError, match="batch queries only"):
        parse_options({"remote": "memory://x", "topic": "t", name: "1"}, streaming=True)
