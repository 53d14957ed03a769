"""The one place a Tierkeeper job creates its SparkSession (``--spark-master``, ``--spark-conf k=v``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DEFAULT_MASTER = "local[*]"


def workers_python(conf: dict[str, str], environ: dict[str, str], executable: str) -> str:
    """The interpreter a job's Python workers run: ``spark.pyspark.python`` when ``--spark-conf`` names
    it (e.g. ``./env/bin/python`` of an environment shipped with ``spark.archives``), else
    ``PYSPARK_PYTHON``, else this interpreter (the one with Tierkeeper installed). PySpark takes it only
    from ``PYSPARK_PYTHON`` when the session is built in a Python process (``spark.pyspark.python`` is
    read by ``spark-submit`` alone), so the job sets that variable from it."""
    return conf.get("spark.pyspark.python") or environ.get("PYSPARK_PYTHON") or executable


def session_conf(conf: dict[str, str]) -> dict[str, str]:
    """The settings a job's session starts with: Tierkeeper's, then ``conf`` (``--spark-conf``), which
    wins. Its Python workers are forked from Tierkeeper's Python daemon (storage_core/spark/daemon.py)."""
    from storage_core.spark.daemon import DAEMON_CONF
    from storage_core.spark.daemon import MODULE as DAEMON_MODULE

    return {"spark.ui.showConsoleProgress": "false", DAEMON_CONF: DAEMON_MODULE, **conf}


def spark_session(app: str, master: str | None, conf: dict[str, str]) -> Any:
    """A session for one job (:func:`session_conf`); its Python workers run :func:`workers_python`."""
    os.environ["PYSPARK_PYTHON"] = workers_python(conf, dict(os.environ), sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app).master(master or DEFAULT_MASTER)
    for key, value in session_conf(conf).items():
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
