"""Which Python Spark's workers run, and a one-line hint when it cannot run Tierkeeper.

Spark's Python workers (the data source planner and readers included) run ``PYSPARK_PYTHON`` as the
driver process had it when the SparkSession started, else ``python3`` from PATH. ``spark.pyspark.python``
counts only through ``spark-submit`` (which sets ``PYSPARK_PYTHON`` from it); given to a session built in
a Python process it changes nothing. A session started with a virtualenv's interpreter but without the
virtualenv on PATH hands its workers another Python, which fails with ``No module named 'pyarrow'`` or
similar deep inside a Spark stack trace. ``register`` checks the interpreter up front;
``pyspark_tierkeeper`` rewrites the worker's own import error.

A relative path (``./env/bin/python`` of an environment shipped with ``spark.archives``) is looked up in
each process's working directory: the executors' holds the unpacked archive, and the driver, which runs
the data source's planner with the same interpreter, needs it in its own (client mode).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

PROBE = "import pyarrow, pyspark, storage_core.spark"


def worker_python(spark: Any) -> str:
    """The interpreter ``spark``'s Python workers run."""
    return str(spark.sparkContext.pythonExec)


def ignored_setting(spark: Any) -> str | None:
    """``spark.pyspark.python`` when it names another interpreter than the workers run (it was given to
    a session built in Python, where only ``PYSPARK_PYTHON`` counts), else None."""
    configured = spark.sparkContext.getConf().get("spark.pyspark.python", None)
    return configured if configured and configured != worker_python(spark) else None


def is_relative(python: str) -> bool:
    """A path resolved in each process's working directory (not a bare name looked up on PATH)."""
    return "/" in python and not os.path.isabs(python)


def problem(python: str) -> str | None:
    """Why ``python`` cannot run Tierkeeper's Spark tasks (its own error, one line), or None."""
    if python == sys.executable:
        return None
    try:
        proc = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120)
    except OSError as e:
        return f"{python} does not start ({e.strerror})"
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"{python} exited with {proc.returncode}"
