"""One Spark task of the Iceberg export: read a scan split as Arrow and write its records as Parquet data
files of the table (one per day of ``timestamp``, as the partition spec says), returning their
descriptions; the driver commits them all in one snapshot (jobs/export_iceberg.py). Nothing a task writes
is visible until then."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from storage_core.adapters.schema_registry import SchemaRegistry
from storage_core.faults import fault_point
from storage_core.formats.value_decoding import AvroDecoder, JsonDecoder, ValueDecoding, decode_values
from storage_core.remote.reader import Isolation, ReadOptions, RemoteReader
from storage_core.remote.scan_plan import ScanSplit, read_split
from storage_core.spark.iceberg_catalog import StoreFileIO
from storage_core.spark.iceberg_table import DAY_FIELD, DECODE_ERROR, DECODED, PARTITION_FIELD, decoded_type
from storage_core.spark.options import StorageSpec


@dataclass(frozen=True)
class IcebergTask:
    """A picklable task: where to read, the table (metadata: schema, spec, location) and the split."""

    source: StorageSpec
    target: StorageSpec
    isolation: Isolation
    split: ScanSplit
    metadata: Any  # pyiceberg TableMetadata of the snapshot the run builds on
    decoding: ValueDecoding | None = None
    registry: SchemaRegistry | None = None
    """The schema registry's client for Avro, credentials resolved on the driver."""
    final: bool = True
    """Whether values with fields the table lacks are written (those fields named in the error column)
    rather than sent back to the driver to widen the table first."""


@dataclass(frozen=True)
class SplitFiles:
    """What one task stored: the split's window, its rows and the data files (pyiceberg DataFile)."""

    partition: int
    first: int
    end: int
    rows: int
    files: list[Any]


@dataclass(frozen=True)
class MissingColumns:
    """A split whose decoded values have fields the table lacks (an Arrow struct type of them); it wrote
    nothing and runs again once the driver has added them."""

    split: ScanSplit
    missing: pa.StructType


def write_split(task: IcebergTask) -> SplitFiles | MissingColumns:
    split = task.split
    with RemoteReader(task.source.open(), ReadOptions(isolation=task.isolation)) as reader:
        batches = list(read_split(reader, split, include_headers=True))
    rows = sum(b.num_rows for b in batches)
    files: list[Any] = []
    if rows:
        table = pa.Table.from_batches(batches)
        if task.decoding is not None:
            decoded = decode_values(
                table.column("value").to_pylist(),
                _decoder(task.decoding, task.registry),
                decoded_type(task.metadata),
            )
            if decoded.missing is not None and not task.final:
                return MissingColumns(split, decoded.missing)
            if decoded.decoded is not None:
                table = table.append_column(DECODED, decoded.decoded)
            table = table.append_column(DECODE_ERROR, decoded.errors)
        files = write_data_files(task.metadata, table, task.target, split.partition)
    fault_point("export.iceberg.split.written")
    return SplitFiles(split.partition, split.start_offset, split.end_offset, rows, files)


def _decoder(decoding: ValueDecoding, registry: SchemaRegistry | None) -> JsonDecoder | AvroDecoder:
    if decoding.format == "json":
        return JsonDecoder()
    assert registry is not None, "the driver builds it for avro"
    return AvroDecoder(registry)


def write_data_files(metadata: Any, table: pa.Table, target: StorageSpec, partition: int) -> list[Any]:
    """One Parquet data file per day of ``timestamp`` (every row is of Kafka partition ``partition``),
    written by pyiceberg's writer (field ids by name, the table's write properties, each file's column
    statistics); returns the files' descriptions (pyiceberg DataFile) for the commit.

    The rows are split by day here rather than by pyiceberg's generic partitioner, whose day transform on
    Arrow needs the Rust extension pyiceberg-core; one split is one Kafka partition already."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema, write_file
    from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
    from pyiceberg.table import WriteTask

    spec, schema = metadata.spec(), metadata.schema()
    by_name = {f.name: f for f in spec.fields}
    task_schema = pyarrow_to_schema(
        table.schema, name_mapping=schema.name_mapping, format_version=metadata.format_version
    )
    micros = table.column("timestamp").cast(pa.int64()).to_numpy()
    days = micros // _MICROS_PER_DAY  # floor: a timestamp before 1970 belongs to the day before
    write_uuid = uuid.uuid4()
    tasks = []
    for task_id, day in enumerate(sorted(set(days.tolist()))):
        key = PartitionKey(
            field_values=[
                PartitionFieldValue(by_name[DAY_FIELD], int(day)),
                PartitionFieldValue(by_name[PARTITION_FIELD], partition),
            ],
            partition_spec=spec,
            schema=schema,
        )
        part = table.filter(pa.array(days == day))
        tasks.append(WriteTask(write_uuid, task_id, task_schema, part.to_batches(), partition_key=key))
    return list(write_file(StoreFileIO(target), metadata, iter(tasks)))


_MICROS_PER_DAY = 86_400_000_000
