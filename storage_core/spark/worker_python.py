"""Which Python Spark's workers run, and a one-line hint when it cannot run Tierkeeper.

Spark's Python workers (the data source planner and readers included) run ``PYSPARK_PYTHON`` (or the
``spark.pyspark.python`` setting), else ``python3`` from PATH: a session started with a virtualenv's
interpreter but without the virtualenv on PATH hands its workers another Python, which fails with
``No module named 'pyarrow'`` or similar deep inside a Spark stack trace. ``register`` checks the
interpreter up front; ``pyspark_tierkeeper`` rewrites the worker's own import error.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

PROBE = "import pyarrow, pyspark, storage_core.spark"


def worker_python(spark: Any) -> str:
    """The interpreter ``spark``'s Python workers run."""
    configured = spark.sparkContext.getConf().get("spark.pyspark.python", None)
    return str(configured or spark.sparkContext.pythonExec)


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
