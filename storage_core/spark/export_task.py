"""One Spark task of the Parquet export: read a scan split as Arrow and write one Parquet file per UTC
date of its records into the target (names and layout: export_plan.py)."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage_core.remote.reader import Isolation, ReadOptions, RemoteReader
from storage_core.remote.scan_plan import ScanSplit, read_split
from storage_core.spark.export_plan import data_key
from storage_core.spark.options import StorageSpec


@dataclass(frozen=True)
class ExportTask:
    """A picklable task: where to read, where to write, and the split."""

    source: StorageSpec
    target: StorageSpec
    isolation: Isolation
    split: ScanSplit


def export_split(task: ExportTask) -> tuple[int, int, int, int]:
    """Write the split's records; returns (partition, first offset, end offset, records written)."""
    split = task.split
    with RemoteReader(task.source.open(), ReadOptions(isolation=task.isolation)) as reader:
        batches = list(read_split(reader, split, include_headers=True))
    rows = sum(b.num_rows for b in batches)
    if rows:
        table = pa.Table.from_batches(batches).drop_columns(["partition"])  # the directory says it
        dates = pc.strftime(table.column("timestamp"), format="%Y-%m-%d", locale="C")
        target = task.target.open()
        for date in sorted(set(dates.to_pylist())):
            part = table.filter(pc.equal(dates, date))
            buf = io.BytesIO()
            pq.write_table(part, buf)
            key = data_key(target.root, split.partition, date, split.start_offset, split.end_offset)
            target.put_atomic(key, buf.getvalue())
    return split.partition, split.start_offset, split.end_offset, rows
