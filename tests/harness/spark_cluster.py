"""A Spark standalone cluster on loopback: one master and ``workers`` workers, started from the installed
pyspark's own launcher (``bin/spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``),
so a fresh machine with the project's venv and Java runs it. Each worker offers one core and starts its
executors (separate JVMs, their Python workers under the executor's directory) in its own work dir.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from subprocess import Popen

from harness.kafka_dist import HarnessError, java_binary
from harness.ports import free_ports
from harness.process import spawn, terminate

START_TIMEOUT = 300.0
"""Up to 7 sessions share 2 cores: three JVMs may take minutes to start, never fail for it."""


class SparkStandalone:
    def __init__(self, workdir: Path, workers: int = 2) -> None:
        self.workdir = workdir
        self.workers = workers
        self._procs: list[Popen[bytes]] = []
        port, ui = free_ports(2)
        self.master_url = f"spark://127.0.0.1:{port}"
        self._port, self._ui = port, ui

    def work_dir(self, worker: int) -> Path:
        """Where worker ``worker`` (0-based) runs its executors: ``<app id>/<executor id>/``."""
        return self.workdir / f"worker-{worker}"

    def env(self) -> dict[str, str]:
        """The environment the master and workers run in (their executors inherit it)."""
        import pyspark

        java = java_binary()
        # As on a node of a real cluster, this venv is not on the workers' PATH: their executors' Python
        # workers run only the interpreter the application names (or python3 from PATH, without
        # Tierkeeper), never this venv by accident.
        venv_bin = str(Path(sys.executable).parent)
        path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
        inherited = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON")}
        return {
            **inherited,
            "PATH": path,
            "SPARK_HOME": str(Path(pyspark.__file__).parent),
            "JAVA_HOME": str(Path(java).resolve().parents[1]),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_LOG_DIR": str(self.workdir / "logs"),
            "SPARK_LOCAL_DIRS": str(self.workdir / "local"),
            # The master's REST submission server and the workers' UI: not needed, fewer ports.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_WORKER_OPTS": "-Dspark.ui.enabled=false",
        }

    def start(self) -> SparkStandalone:
        import pyspark

        spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = self.env()
        master = "org.apache.spark.deploy.master.Master"
        host = ["--host", "127.0.0.1"]
        self._procs.append(
            spawn(
                [spark_class, master, *host, "--port", str(self._port), "--webui-port", str(self._ui)],
                log_path=self.workdir / "master.log",
                env=env,
                cwd=self.workdir,
            )
        )
        for n in range(self.workers):
            self.work_dir(n).mkdir(exist_ok=True)
            (webui,) = free_ports(1)
            argv = [spark_class, "org.apache.spark.deploy.worker.Worker", *host, "--cores", "1"]
            argv += ["--memory", "1g", "--webui-port", str(webui), "--work-dir", str(self.work_dir(n))]
            self._procs.append(
                spawn(
                    [*argv, self.master_url],
                    log_path=self.workdir / f"worker-{n}.log",
                    env=env,
                    cwd=self.workdir,
                )
            )
        try:
            self._wait_alive()
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict[str, object]:
        """The master's view (its web UI's JSON): workers, applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self._ui}/json/", timeout=10) as resp:
            state: dict[str, object] = json.load(resp)
            return state

    def _wait_alive(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        seen: object = None
        while time.monotonic() < deadline:
            for proc, log in zip(self._procs, ["master", *(f"worker-{n}" for n in range(self.workers))]):
                if proc.poll() is not None:
                    tail = (self.workdir / f"{log}.log").read_text(errors="replace")[-2000:]
                    raise HarnessError(f"Spark {log} exited with {proc.returncode}: {tail}")
            try:
                seen = self.state().get("workers")
            except OSError:
                seen = None
            if isinstance(seen, list) and sum(w.get("state") == "ALIVE" for w in seen) == self.workers:
                return
            time.sleep(0.5)
        raise HarnessError(f"Spark standalone: {self.workers} workers not alive in {START_TIMEOUT} s: {seen}")

    def stop(self) -> None:
        # Workers first: they kill their executors; the master last.
        for proc in reversed(self._procs):
            terminate(proc)
        self._procs.clear()
