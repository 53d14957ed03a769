"""Tierkeeper on Spark: the ``tierkeeper`` DataSource (read the remote tier as a DataFrame).

This package is an adapter/entry layer: it imports pyspark; the pure core never imports it
(``.importlinter``). Register the source in a session with :func:`register`, or rely on Spark's
automatic registration of installed ``pyspark_*`` packages (``pyspark_tierkeeper``).
"""

from __future__ import annotations

from typing import Any

from storage_core.spark.source import SHORT_NAME, TierkeeperDataSource, TierkeeperPushdownDataSource

__all__ = [
    "SHORT_NAME",
    "TierkeeperDataSource",
    "TierkeeperPushdownDataSource",
    "register",
    "tiered_end_offsets",
]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> type[TierkeeperDataSource]:
    """Register ``format("tierkeeper")`` in ``spark``: with filter pushdown when the session enables it
    (Spark refuses a source that pushes filters while the setting is off). Returns the class registered."""
    enabled = str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true"
    source = TierkeeperPushdownDataSource if enabled else TierkeeperDataSource
    spark.dataSource.register(source)
    return source


def tiered_end_offsets(options: dict[str, str]) -> dict[int, int]:
    """``{partition: one past its last tiered offset}`` for the DataSource options ``options`` (same
    names as ``.option(...)``): the split point between remote history and the brokers' data. Pass it as
    the tierkeeper read's ``endingOffsets`` and the Kafka read's ``startingOffsets`` so a copy finishing
    in between cannot make the two halves overlap."""
    from storage_core.remote.reader import ReadOptions, RemoteReader
    from storage_core.spark.options import parse_options
    from storage_core.spark.windows import tiered_end_offsets as ends

    opts = parse_options(options)
    with RemoteReader(opts.storage.open(), ReadOptions(isolation=opts.isolation)) as reader:
        return ends(reader, opts)
