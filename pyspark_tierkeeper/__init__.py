"""Spark's automatic registration hook: Spark imports installed ``pyspark_*`` packages and registers
their ``DefaultSource`` under its short name, so ``format("tierkeeper")`` works without a
``register`` call. The filter-pushdown variant needs ``storage_core.spark.register(spark)`` (Spark refuses
a pushing source while ``spark.sql.python.filterPushdown.enabled`` is off, its default)."""

from storage_core.spark import TierkeeperDataSource as DefaultSource

__all__ = ["DefaultSource"]
