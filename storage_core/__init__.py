"""Tierkeeper storage core: Kafka log formats, tiering decisions and remote-tier I/O.

Layering (checked by import-linter, see ``.importlinter``):
``storage_core.cli`` (entry points) -> ``storage_core.adapters`` (Kafka Admin, fsspec, Spark)
-> pure core (``formats``, ``fetchers`` and the decision modules). The pure core never imports an
adapter or an entry point.
"""

__version__ = "0.1.0"
