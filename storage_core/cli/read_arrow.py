"""``tierkeeper read --format arrow|parquet``: a partition's records as Arrow IPC or Parquet, decoded by
the Arrow decoder (formats/arrow_records.py) with the columns of Spark's Kafka source, headers included."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from storage_core.errors import ConfigError, OffsetOutOfRangeError
from storage_core.formats.arrow_records import kafka_schema
from storage_core.remote.reader import RemoteReader


def _start_offset(reader: RemoteReader, args: argparse.Namespace, tp: Any) -> int | None:
    if args.from_offset is not None:
        return int(args.from_offset)
    try:
        return next(iter(reader.read_from_timestamp(tp, args.from_timestamp))).offset
    except StopIteration:
        return None


def _limited(batches: Iterator[pa.RecordBatch], limit: int | None) -> Iterator[pa.RecordBatch]:
    left = limit
    for batch in batches:
        if left is not None:
            if left <= 0:
                return
            batch = batch.slice(0, left)
            left -= batch.num_rows
        yield batch


def write_columnar(reader: RemoteReader, args: argparse.Namespace) -> int:
    if args.format == "parquet" and not args.output:
        raise ConfigError("--format parquet needs --output PATH (Parquet is not a stream format)")
    tp = reader.resolve(args.topic, args.partition, args.topic_id)
    try:
        start = _start_offset(reader, args, tp)
    except OffsetOutOfRangeError:
        start = None
    batches = iter(()) if start is None else reader.read_arrow(tp, start, include_headers=True)
    schema = kafka_schema(include_headers=True)
    limited = _limited(batches, args.max_records)
    if args.format == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(args.output, schema) as writer:
            for batch in limited:
                writer.write_batch(batch)
        return 0
    sink: Any = open(args.output, "wb") if args.output else sys.stdout.buffer
    try:
        with pa.ipc.new_stream(sink, schema) as writer:
            for batch in limited:
                writer.write_batch(batch)
    finally:
        if args.output:
            sink.close()
        else:
            sys.stdout.buffer.flush()
    return 0
