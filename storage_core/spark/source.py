"""``spark.read.format("tierkeeper")``: the remote tier as a DataFrame with the Kafka source's schema.

This module is the DataSource Spark registers: its name, its schema, and which reader a read gets. The
readers live beside it: ``batch`` (one plan, one task per split; pushed filters prune it through
``pushdown``), ``stream`` (micro-batches as Spark's Kafka source makes them), both handing Spark the tasks
of ``tasks``; ``hybrid`` and ``hybrid_offsets`` are the tier-then-brokers read of ``continueFromKafka``.
Each task opens its own store from the picklable :class:`~storage_core.spark.options.StorageSpec`, reads
its byte range and yields Arrow batches (formats/arrow_records.py), so no row passes through Python
objects. Spark creates the SparkSession; nothing here does.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

from storage_core.spark.batch import BatchReader
from storage_core.spark.options import parse_include_headers, parse_options
from storage_core.spark.pushdown import pruning_from_filters
from storage_core.spark.stream import StreamReader
from storage_core.spark.tasks import KafkaRangePartition, SplitPartition

__all__ = [
    "HEADERS_COLUMN",
    "SCHEMA",
    "SHORT_NAME",
    "KafkaRangePartition",
    "SplitPartition",
    "TierkeeperDataSource",
    "TierkeeperPushdownDataSource",
    "pruning_from_filters",
]

SHORT_NAME = "tierkeeper"
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
    "timestampType int"
)
HEADERS_COLUMN = ", headers array<struct<key: string, value: binary>>"

_StreamReader = StreamReader
"""The stream reader's name from before it had a module of its own (the tests and benches drive it)."""


class TierkeeperDataSource(DataSource):  # type: ignore[misc]
    """The remote tier as a DataFrame (batch and streaming); pushed filters prune when the session
    enables Python filter pushdown, and are simply left to Spark when it does not."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        # The same for batch and streaming reads: no other option is looked at here (Spark calls schema()
        # before it says which kind of read this is; the reader or streamReader parses the options).
        headers = parse_include_headers(self.options)
        return SCHEMA + (HEADERS_COLUMN if headers else "")

    def reader(self, schema: Any) -> DataSourceReader:
        return BatchReader(parse_options(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return StreamReader(parse_options(self.options, streaming=True))


TierkeeperPushdownDataSource = TierkeeperDataSource
"""The name of the pushdown variant before one class served both (kept for existing code)."""
