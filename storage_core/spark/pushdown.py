"""Filter pushdown of the batch reader: what the AND of Spark's pushed filters allows leaving out.

Works with the one ``TierkeeperDataSource`` (Spark >= 4.1, ``spark.sql.python.filterPushdown.enabled=true``),
the automatically registered one included, and reads still work with the setting off (see
:class:`PruneWithFilters` for how and why). Pushed filters on ``partition``, ``offset`` and ``timestamp``
prune partitions, segments and index entries (``windows.Pruning``); Spark still evaluates every filter on
the rows, so pruning only has to be safe.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader

from storage_core.spark.windows import Pruning

if TYPE_CHECKING:
    from storage_core.spark.batch import BatchReader


class PruneWithFilters:
    """The batch reader's ``pushFilters``: notes what the filters allow leaving out, pushes none.

    Why an object and not a method: PySpark 4.1 refuses a reader that overrides ``pushFilters`` while
    ``spark.sql.python.filterPushdown.enabled`` is off (Spark's default), with
    DATA_SOURCE_PUSHDOWN_DISABLED, so that a source relying on pushdown does not silently lose it. Its
    whole test, in ``pyspark/sql/worker/plan_data_source_read.py``, is::

        getattr(reader.pushFilters, "__func__", None) is not DataSourceReader.pushFilters

    Losing ours is harmless: it only prunes, and it hands every filter back, so Spark evaluates all of
    them on the rows either way. So this object carries the base method as its ``__func__`` and the
    one class (the automatically registered one included) reads whether the session enables pushdown
    or not, and prunes when it does. Spark calls it only with pushdown on; with it off, Spark never
    calls ``pushFilters`` at all (``PythonScanBuilder.pushFilters`` returns first). Should a later
    PySpark check differently, reads with pushdown off fail loudly, never wrongly (the test
    ``test_a_new_session_finds_the_source_without_registering_it`` reads with it off)."""

    def __init__(self, reader: BatchReader) -> None:
        self.__func__ = DataSourceReader.pushFilters
        self._reader = reader

    def __call__(self, filters: list[Any]) -> Iterator[Any]:
        self._reader.pruning = pruning_from_filters(filters)
        # Every filter goes back to Spark: pruning is by whole index entries, not rows.
        yield from filters


def _millis(value: Any) -> int | None:
    if isinstance(value, datetime):
        # Spark hands timestamps as naive local-time datetimes (or aware ones): .timestamp() handles both.
        # Rounded down, so a bound in the middle of a millisecond still keeps that millisecond's records.
        return math.floor(value.timestamp() * 1000)
    return None


def _offset_value(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def pruning_from_filters(filters: Sequence[Any]) -> Pruning:
    """What the AND of pushed filters allows leaving out. A filter it cannot use prunes nothing: any other
    column, ``Not`` (Spark hands ``a <> 1`` as ``Not(EqualTo)``), null tests, string matches, values of
    an unexpected type. Nothing here may fail: Spark evaluates every filter on the rows anyway."""
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )

    partitions: set[int] | None = None
    lo: int | None = None
    hi: int | None = None
    ts_lo: int | None = None

    def tighten_lo(v: int) -> None:
        nonlocal lo
        lo = v if lo is None else max(lo, v)

    def tighten_hi(v: int) -> None:
        nonlocal hi
        hi = v if hi is None else min(hi, v)

    for f in filters:
        attribute = getattr(f, "attribute", None)
        column = attribute[0] if isinstance(attribute, tuple) and len(attribute) == 1 else None
        value = getattr(f, "value", None)
        equal = isinstance(f, EqualTo | EqualNullSafe)
        if column == "partition":
            wanted: set[int] | None = None
            if equal and (number := _offset_value(value)) is not None:
                wanted = {number}
            elif (
                isinstance(f, In)
                and isinstance(value, tuple | list)
                and all(_offset_value(v) is not None for v in value)
            ):
                wanted = set(value)
            if wanted is not None:
                partitions = wanted if partitions is None else partitions & wanted
        elif column == "offset" and (offset := _offset_value(value)) is not None:
            if equal:
                tighten_lo(offset)
                tighten_hi(offset + 1)
            elif isinstance(f, GreaterThan):
                tighten_lo(offset + 1)
            elif isinstance(f, GreaterThanOrEqual):
                tighten_lo(offset)
            elif isinstance(f, LessThan):
                tighten_hi(offset)
            elif isinstance(f, LessThanOrEqual):
                tighten_hi(offset + 1)
        elif column == "timestamp":
            ms = _millis(value)
            if ms is not None and (equal or isinstance(f, GreaterThan | GreaterThanOrEqual)):
                # Only a lower bound prunes: a segment's oldest record is not known, its newest is.
                ts_lo = ms if ts_lo is None else max(ts_lo, ms)
    return Pruning(frozenset(partitions) if partitions is not None else None, lo, hi, ts_lo)
