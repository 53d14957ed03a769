"""Spark's Python daemon (``pyspark.daemon``), with zip archives' import caches re-read only when the
archive changed and each task's connection acknowledging at once: set
``spark.python.daemon.module=storage_core.spark.daemon`` (Tierkeeper's own jobs do).

Before every task a Python worker calls ``importlib.invalidate_caches()``. On Python 3.10 and 3.11 that
re-reads the whole directory of every zip archive on ``sys.path`` once per importer holding it, and a
PySpark worker imports pyspark from ``pyspark.zip`` (some 1,300 entries, one importer per subpackage):
measured here, about a quarter of a second of each task, which dominated a micro-batch of a Python data
source (docs/benchmarks.md, issue 31). CPython 3.12 made that invalidation lazy (python/cpython#103200).
Here each archive's directory is read again only when the file's identity, size or modification time
changed since it was last read, so a changed archive is still seen and an unchanged one costs a ``stat``.

Spark starts this module as ``python -m storage_core.spark.daemon <worker module>``; it hands over to
``pyspark.daemon`` (whose workers are forked from it and inherit the change). On Python 3.12 and later
the import caches are left alone.

On any Python, each task's connection to the JVM is told to acknowledge at once (:func:`ack_at_once`):
over Spark's loopback TCP every task waited ~40 ms for its input otherwise (issue 31's trace).
"""

from __future__ import annotations

import os
import socket
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


def ack_at_once(worker: Callable[[Any, bool], int]) -> Callable[[Any, bool], int]:
    """pyspark.daemon's ``worker`` with the task's TCP connection told to acknowledge at once.

    Over loopback TCP each task's worker waited ~40 ms between its command and its input: the JVM's
    second small write held back until the first was acknowledged (Nagle's algorithm on its socket) while
    this side delayed the acknowledgement (Linux's delayed ACK, 40 ms at least). ``TCP_QUICKACK`` makes
    the kernel acknowledge at once; it is not permanent (the kernel leaves that mode by itself), so it is
    set again before every task. ``TCP_NODELAY`` spares the worker's own small writes the same wait."""

    def run(sock: Any, authenticated: bool) -> int:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if hasattr(socket, "TCP_QUICKACK"):  # Linux only
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        return worker(sock, authenticated)

    return run


def main() -> None:
    install()
    # Imported, not run as __main__, so that its ``worker`` is wrapped before ``manager`` forks any;
    # it reads the worker module from sys.argv as it loads, which Spark's command line already holds.
    import pyspark.daemon as daemon

    daemon.worker = ack_at_once(daemon.worker)  # type: ignore[attr-defined]
    daemon.manager()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
