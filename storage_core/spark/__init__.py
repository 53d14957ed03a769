"""Tierkeeper on Spark: the ``tierkeeper`` DataSource (read the remote tier as a DataFrame).

This package is an adapter/entry layer: it imports pyspark; the pure core never imports it
(``.importlinter``). Register the source in a session with :func:`register`, or rely on Spark's
automatic registration of installed ``pyspark_*`` packages (``pyspark_tierkeeper``).
"""

from __future__ import annotations

import sys
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
"""The session setting that lets Spark push filters to Python data sources (off by default)."""


def register(spark: Any) -> type[TierkeeperDataSource]:
    """Register ``format("tierkeeper")`` in ``spark`` (Spark also does it by itself through the installed
    ``pyspark_tierkeeper`` package). Pushed filters prune when the session sets
    ``spark.sql.python.filterPushdown.enabled=true``, with either registration. Fails with what to set
    when the session's Python workers run an interpreter that cannot import Tierkeeper (Spark would
    fail later, deep in a worker). Returns the class."""
    import os

    from storage_core.errors import ConfigError
    from storage_core.spark.worker_python import ignored_setting, is_relative, problem, worker_python

    python = worker_python(spark)
    ignored = ignored_setting(spark)
    if ignored is not None:
        raise ConfigError(
            f"spark.pyspark.python is {ignored}, but this session's Python workers run {python}: a session "
            f"built in a Python process takes them from PYSPARK_PYTHON, so set PYSPARK_PYTHON={ignored} "
            "before the SparkSession starts (spark-submit does that from spark.pyspark.python)"
        )
    why = problem(python)
    if why is not None and is_relative(python):
        raise ConfigError(
            f"Spark's Python workers run {python}, relative to each process's working directory: the "
            f"executors find it in the unpacked spark.archives, but this driver runs the data source's "
            f"planner with it too, in {os.getcwd()} ({why}): unpack the same archive there or link its "
            "directory to the environment it was packed from (docs/spark.md, On a cluster)"
        )
    if why is not None:
        raise ConfigError(
            f"Spark's Python workers run {python}, which cannot run Tierkeeper ({why}): set PYSPARK_PYTHON "
            f"to {sys.executable} or another interpreter with Tierkeeper installed, before the SparkSession "
            "starts"
        )
    spark.dataSource.register(TierkeeperDataSource)
    return TierkeeperDataSource


def tiered_end_offsets(options: dict[str, str]) -> dict[int, int]:
    """``{partition: one past its last tiered offset}`` for the DataSource options ``options`` (same
    names as ``.option(...)``): the split point between remote history and the brokers' data. Pass it as
    the tierkeeper read's ``endingOffsets`` and the Kafka read's ``startingOffsets`` so a copy finishing
    in between cannot make the two halves overlap."""
    from storage_core.errors import ConfigError
    from storage_core.remote.reader import ReadOptions, RemoteReader
    from storage_core.spark.options import parse_options
    from storage_core.spark.windows import tiered_end_offsets as ends

    opts = parse_options(options)
    if not opts.topic:
        raise ConfigError("tiered_end_offsets reads one topic: name it with option topic")
    with RemoteReader(opts.storage.open(), ReadOptions(isolation=opts.isolation)) as reader:
        return {tp.partition: end for tp, end in ends(reader, opts).items()}
