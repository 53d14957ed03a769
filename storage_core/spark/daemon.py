"""Spark's Python daemon (``pyspark.daemon``), with zip archives' import caches re-read only when the
archive changed: set ``spark.python.daemon.module=storage_core.spark.daemon`` (Tierkeeper's own jobs do).

Before every task a Python worker calls ``importlib.invalidate_caches()``. On Python 3.10 and 3.11 that
re-reads the whole directory of every zip archive on ``sys.path`` once per importer holding it, and a
PySpark worker imports pyspark from ``pyspark.zip`` (some 1,300 entries, one importer per subpackage):
measured here, about a quarter of a second of each task, which dominated a micro-batch of a Python data
source (docs/benchmarks.md, issue 31). CPython 3.12 made that invalidation lazy (python/cpython#103200).
Here each archive's directory is read again only when the file's identity, size or modification time
changed since it was last read, so a changed archive is still seen and an unchanged one costs a ``stat``.

Spark starts this module as ``python -m storage_core.spark.daemon <worker module>``; it hands over to
``pyspark.daemon`` (whose workers are forked from it and inherit the change). On Python 3.12 and later
it changes nothing.
"""

from __future__ import annotations

import os
import runpy
import sys
import zipimport
from collections.abc import Callable
from typing import Any

DAEMON_CONF = "spark.python.daemon.module"
"""The Spark setting naming the module Spark runs as its Python daemon."""
MODULE = "storage_core.spark.daemon"
"""This module, the value of :data:`DAEMON_CONF`."""

Stamp = tuple[int, int, int]


def _stamp(path: str) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def lazy_invalidation(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """``zipimporter.invalidate_caches`` that calls ``original`` (a full re-read) only when the archive
    changed since its directory was last read by any importer, else takes the directory already read."""
    read: dict[str, Stamp] = {}

    def invalidate_caches(self: Any) -> None:
        stamp = _stamp(self.archive)
        cached = zipimport._zip_directory_cache.get(self.archive)  # type: ignore[attr-defined]
        if stamp is not None and read.get(self.archive) == stamp and cached is not None:
            self._files = cached
            return
        original(self)
        if stamp is not None:
            read[self.archive] = stamp

    invalidate_caches.lazy = True  # type: ignore[attr-defined]
    return invalidate_caches


def install() -> bool:
    """Make this process's zip importers re-read an archive's directory only when it changed. Returns
    whether anything changed: False on Python 3.12+ (already lazy) or when installed before."""
    current = zipimport.zipimporter.invalidate_caches
    if sys.version_info >= (3, 12) or getattr(current, "lazy", False):
        return False
    zipimport.zipimporter.invalidate_caches = lazy_invalidation(current)  # type: ignore[method-assign,assignment]
    return True


def main() -> None:
    install()
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
