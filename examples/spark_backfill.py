"""Backfill from the remote tier, then continue with live data from Kafka, in one DataFrame.

History comes straight from object storage through format("tierkeeper") (no broker involved, segments
read in parallel); what is not tiered yet comes from the brokers through Spark's own format("kafka").
Each partition is split at one offset, the remote tier's end when the query is planned, given to both
reads, so every offset is read exactly once; both sources have the same schema, so the halves union.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python examples/spark_backfill.py \\
        --remote s3://bucket/tier --topic orders --bootstrap-servers kafka:9092 \\
        [--option endpointUrl=http://minio:9000 --option pathStyle=true] --jars <connector jars>

format("kafka") needs Spark's Kafka connector on the classpath: spark-sql-kafka-0-10_2.13 of the same
Spark version and its dependencies (`PYTHONPATH=tests .venv/bin/python -m harness.spark_kafka` resolves
them with Maven from e2e/spark-kafka/pom.xml and prints their paths).
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def history_and_live(spark: Any, topic: str, bootstrap: str, remote_options: dict[str, str]) -> Any:
    """Every record of ``topic``: tiered offsets from the remote tier, the rest from Kafka.

    ``remote_options`` are the tierkeeper source's options (``remote`` and how to reach it)."""
    from confluent_kafka.admin import AdminClient

    from storage_core.spark import register, tiered_end_offsets

    register(spark)
    options = {**remote_options, "topic": topic, "includeHeaders": "true"}
    boundary = tiered_end_offsets(options)
    history = (
        spark.read.format("tierkeeper")
        .options(**options)
        .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in boundary.items()}}))
        .load()
    )
    # The Kafka source wants every partition named; one with nothing tiered starts at its beginning (-2).
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    starting = {str(p): boundary.get(p, -2) for p in metadata.topics[topic].partitions}
    live = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("startingOffsets", json.dumps({topic: starting}))
        .option("endingOffsets", "latest")
        .load()
    )
    return history.unionByName(live)


def main() -> None:
    parser = argparse.ArgumentParser(description="backfill from the remote tier, then live data from Kafka")
    parser.add_argument("--remote", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="tierkeeper option"
    )
    parser.add_argument("--jars", help="comma-separated jars of Spark's Kafka connector")
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("tierkeeper-backfill")
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    options = dict(o.split("=", 1) for o in args.option)
    df = history_and_live(spark, args.topic, args.bootstrap_servers, {"remote": args.remote, **options})
    df.groupBy("partition").count().orderBy("partition").show()
    spark.stop()


if __name__ == "__main__":
    main()
