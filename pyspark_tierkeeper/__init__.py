"""Spark's automatic registration hook: Spark imports installed ``pyspark_*`` packages and registers
their ``DefaultSource`` under its short name, so ``format("tierkeeper")`` works without a
``register`` call, filter pushdown included once the session sets
``spark.sql.python.filterPushdown.enabled=true``.

Spark imports this in its Python workers, which run ``PYSPARK_PYTHON`` (``spark-submit`` sets it from
``spark.pyspark.python``), else ``python3`` from PATH: when that is not the interpreter Tierkeeper is
installed in (a session started with a virtualenv's Python but without the virtualenv on PATH), the
error says what to set.
Nothing else of Tierkeeper is imported to say it, since that is what fails."""

import sys

try:
    from storage_core.spark import TierkeeperDataSource as DefaultSource
except ModuleNotFoundError as e:
    raise ModuleNotFoundError(
        f"No module named {e.name!r} in {sys.executable}, the Python that Spark's workers run: set "
        "PYSPARK_PYTHON (spark-submit: spark.pyspark.python) to the interpreter of the environment "
        "Tierkeeper is installed in, before the SparkSession starts",
        name=e.name,
    ) from e

__all__ = ["DefaultSource"]
