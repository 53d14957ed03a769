"""The one place a Tierkeeper job creates its SparkSession (``--spark-master``, ``--spark-conf k=v``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from storage_core.errors import ConfigError

DEFAULT_MASTER = "local[*]"


def parse_conf(items: Sequence[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--spark-conf {item!r}: expected KEY=VALUE")
        conf[key.strip()] = value
    return conf


def spark_session(app: str, master: str | None, conf: dict[str, str]) -> Any:
    """A session for one job; Python workers run this interpreter (the one with tierkeeper installed)
    unless the configuration says otherwise."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app).master(master or DEFAULT_MASTER)
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@contextmanager
def job_spark_session(app: str, master: str | None, conf: dict[str, str]) -> Iterator[Any]:
    """A session for one run in a longer-lived process (standalone mode): stopped afterwards unless it
    was already running when the run began (then it belongs to whoever started it)."""
    from pyspark import SparkContext

    # The process's context, not SparkSession.getActiveSession(): that one is per thread, and standalone
    # mode runs its actions on worker threads, where it said "none" and the run stopped the session of
    # whoever had started it (a test's, or an embedding application's).
    existing = SparkContext._active_spark_context is not None
    spark = spark_session(app, master, conf)
    try:
        yield spark
    finally:
        if not existing:
            spark.stop()
