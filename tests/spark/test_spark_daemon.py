"""storage_core/spark/daemon.py: Spark's Python daemon with zip archives' import caches re-read only when
the archive changed (Python 3.11 re-reads pyspark.zip's directory once per importer before every task),
and each task's TCP connection acknowledging at once (each task waited ~40 ms for its input otherwise)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import zipimport
from pathlib import Path
from typing import Any

from storage_core.jobs.spark_session import session_conf
from storage_core.spark.daemon import DAEMON_CONF, MODULE, ack_at_once

# Run in a child interpreter: installing patches this process's zipimport for good.
_PROBE = textwrap.dedent(
    """
    import importlib, json, sys, zipfile, zipimport
    archive, install = sys.argv[1], sys.argv[2] == "install"
    reads = []
    original = zipimport._read_directory
    def counted(path):
        reads.append(path)
        return original(path)
    zipimport._read_directory = counted
    installed = []
    if install:
        from storage_core.spark.daemon import install as lazy
        installed = [lazy(), lazy()]
    sys.path.insert(0, archive)
    import pkg.sub  # two importers over the archive: pkg's and pkg.sub's
    before = len(reads)
    for _ in range(5):
        importlib.invalidate_caches()
    unchanged = len(reads) - before
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("pkg/added.py", "VALUE = 7\\n")
    importlib.invalidate_caches()
    import pkg.added
    print(json.dumps({"unchanged": unchanged, "after_change": len(reads) - before - unchanged,
                      "value": pkg.added.VALUE, "installed": installed}))
    """
)


def _probe(tmp_path: Path, install: bool) -> dict[str, Any]:
    import zipfile

    archive = tmp_path / f"lib-{install}.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/sub/__init__.py", "")
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(archive), "install" if install else "stock"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(tmp_path: Path) -> None:
    stock = _probe(tmp_path, install=False)
    lazy = _probe(tmp_path, install=True)
    # A changed archive's new module imports, with or without the change.
    assert stock["value"] == lazy["value"] == 7, (stock, lazy)
    if sys.version_info >= (3, 12):
        # Python's own invalidation is lazy there: installing changes nothing.
        assert lazy["installed"] == [False, False], lazy
        return
    # Installing twice changes it once.
    assert lazy["installed"] == [True, False], lazy
    # The cost this module removes: every invalidation re-reads the archive once per importer.
    assert stock["unchanged"] >= 5 * 2, stock
    # Read once by the first invalidation, for all its importers (what the archive was when they were
    # made is not known), then never while it is unchanged.
    assert lazy["unchanged"] == 1, lazy
    # A changed archive is read again, once for all its importers.
    assert lazy["after_change"] == 1, lazy


def test_the_session_s_python_workers_run_the_daemon(spark: Any) -> None:
    """The tests' session sets it as the README tells users to; its tasks run in workers it forked."""
    assert spark.sparkContext.getConf().get(DAEMON_CONF) == MODULE

    def lazy(_: Any) -> bool:
        return bool(getattr(zipimport.zipimporter.invalidate_caches, "lazy", False))

    expected = sys.version_info < (3, 12)
    assert spark.sparkContext.parallelize([0, 1], 2).map(lazy).collect() == [expected, expected]


def test_a_job_session_sets_the_daemon_unless_its_conf_names_another() -> None:
    assert session_conf({})[DAEMON_CONF] == MODULE
    assert session_conf({DAEMON_CONF: "pyspark.daemon"})[DAEMON_CONF] == "pyspark.daemon"


def test_a_task_s_tcp_connection_acknowledges_at_once_and_a_unix_one_is_left_alone() -> None:
    seen: list[tuple[int, int]] = []

    def worker(sock: Any, authenticated: bool) -> int:
        if sock.family == socket.AF_UNIX:
            seen.append((-1, -1))
        else:
            seen.append(
                (
                    sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
                    sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK),
                )
            )
        return 7

    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname()):
            accepted, _ = server.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
                assert ack_at_once(worker)(accepted, True) == 7
        assert seen[-1][0] != 0 and seen[-1][1] != 0, seen
    left, right = socket.socketpair()
    with left, right:
        assert ack_at_once(worker)(left, False) == 7
    assert seen[-1] == (-1, -1)


def test_the_session_s_task_workers_talk_to_the_jvm_without_nagle(spark: Any) -> None:
    """The tests' session runs the daemon (as the README tells users), so its task workers' connection to
    the JVM has TCP_NODELAY set (pyspark's own daemon leaves it off)."""

    def nodelay(_: Any) -> list[int]:
        import os
        import socket

        flags = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:["):
                    continue
                sock = socket.socket(fileno=os.dup(int(fd)))
            except OSError:  # the listing's own descriptor, closed by now
                continue
            with sock:
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    flags.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        return flags

    for flags in spark.sparkContext.parallelize([0, 1], 2).map(nodelay).collect():
        assert flags and all(flags), flags
