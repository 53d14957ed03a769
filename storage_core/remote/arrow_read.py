"""Grouping a stream of batches into Arrow record batches (the Arrow read path of the reader, the
``tierkeeper read --format arrow|parquet`` command and the Spark DataSource).

Batches are decoded a group at a time, one Arrow batch per group: large enough that the decoder's
per-call cost (tens of microseconds of Python) is small per record, small enough that memory stays flat.
The decoder checks each batch's CRC and walks its records in one pass, so the group's size no longer
decides what is in cache. A group never spans two mapped objects: within one, the decoder reads the
records where they lie instead of gathering them first. See docs/benchmarks.md, "Spark data pipeline".
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable, Iterator

import pyarrow as pa

from storage_core.formats import crc_kernel
from storage_core.formats.arrow_records import decode_arrow
from storage_core.formats.checked_batches import CrcChecks
from storage_core.formats.record_batch import RawBatch, validate_crc

GROUP_BYTES = 16 << 20
"""Stored bytes of batches decoded per Arrow batch (4 MiB groups cost ~0.03 us more per 1 KB record)."""

SPARK_GROUP_BYTES = 4 << 20
"""The same for a Spark task: the JVM holds each batch while it turns it into rows, so smaller batches
keep the executor's memory down (16 MiB groups: ~130 MB more JVM and ~50 MB more Python worker RSS in
the 1 GiB scan of the benchmark, for no shorter scan)."""


def _mapping(batch: RawBatch) -> object | None:
    """The mapped object ``batch`` is a view of, if any."""
    data = batch.data
    owner = data.obj if isinstance(data, memoryview) else None
    return owner if isinstance(owner, mmap.mmap) else None


def decoder_checks() -> CrcChecks:
    """How a read feeding :func:`arrow_batches` should have its CRCs checked: by the decoder during its
    record walk where the compiled loops have the CRC instruction (each batch read from memory once),
    else by the read, each batch just before the decoder reads it."""
    return CrcChecks.DECODER if crc_kernel.HARDWARE else CrcChecks.INLINE


def arrow_batches(
    batches: Iterable[RawBatch],
    checks: CrcChecks,
    topic: str,
    partition: int,
    *,
    include_headers: bool = False,
    min_offset: int | None = None,
    end_offset: int | None = None,
    group_bytes: int = GROUP_BYTES,
    path: str | None = None,
    zero_copy: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records of ``batches`` with ``min_offset <= offset < end_offset``; stops
    reading ``batches`` at the first one that starts at or past ``end_offset``. Empty groups (every
    record filtered out) are not yielded. ``checks``: how the CRCs of ``batches`` were checked; with
    ``CrcChecks.DECODER`` they were not, and are checked here."""
    verify_crc = checks is CrcChecks.DECODER
    group: list[RawBatch] = []
    held = 0
    mapping: object | None = None

    def flush() -> Iterator[pa.RecordBatch]:
        out = decode_arrow(
            group,
            topic,
            partition,
            include_headers=include_headers,
            min_offset=min_offset,
            end_offset=end_offset,
            path=path,
            zero_copy=zero_copy,
            verify_crc=verify_crc,
        )
        if out.num_rows:
            yield out

    for batch in batches:
        if end_offset is not None and batch.header.base_offset >= end_offset:
            break
        if min_offset is not None and batch.header.last_offset < min_offset:
            if verify_crc:  # left out on its header's word: see CrcChecks.DECODER
                validate_crc(batch.data, path=batch.path or path, position=batch.position)
            continue
        if group and _mapping(batch) is not mapping:
            yield from flush()
            group, held = [], 0
        mapping = _mapping(batch)
        group.append(batch)
        held += len(batch.data)
        if held >= group_bytes:
            yield from flush()
            group, held = [], 0
    if group:
        yield from flush()
