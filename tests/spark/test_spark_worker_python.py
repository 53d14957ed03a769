"""A Spark session whose Python workers run an interpreter without Tierkeeper (PYSPARK_PYTHON unset and
the virtualenv not on PATH: workers run ``python3`` from PATH) fails saying what to set, at
``register`` before any worker starts, and in the worker's own import of ``pyspark_tierkeeper``; so do
a shipped environment's relative interpreter missing from the driver's directory, and a
``spark.pyspark.python`` that the session ignores. A job's ``--spark-conf spark.pyspark.python`` names
its workers' Python.

Real parts: a bare virtualenv made by the test (no packages), the interpreter Spark would run."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from storage_core.jobs.spark_session import workers_python
from storage_core.spark.worker_python import is_relative, problem

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    where = tmp_path_factory.mktemp("bare-venv")
    venv.create(where, with_pip=False, symlinks=True)
    return str(where / "bin" / "python")


def test_an_interpreter_without_tierkeeper_is_named_with_what_to_set(bare_python: str) -> None:
    assert problem(sys.executable) is None
    why = problem(bare_python)
    assert why is not None and "No module named" in why and "\n" not in why
    # What a Spark worker of that interpreter does first: import the registration package (here with the
    # source tree on its path, as an interpreter of another environment might have it).
    proc = subprocess.run(
        [bare_python, "-c", "import pyspark_tierkeeper"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "set PYSPARK_PYTHON" in last and bare_python.rsplit("/", 1)[-1] in last, proc.stderr[-2000:]


def test_a_jobs_spark_conf_names_its_workers_python_over_the_environment() -> None:
    # PySpark reads only PYSPARK_PYTHON in a session built in Python: the job sets it from --spark-conf.
    shipped = {"spark.pyspark.python": "./env/bin/python"}
    assert (
        workers_python(shipped, {"PYSPARK_PYTHON": "/usr/bin/python3"}, "/venv/bin/python")
        == "./env/bin/python"
    )
    assert (
        workers_python({}, {"PYSPARK_PYTHON": "/usr/bin/python3"}, "/venv/bin/python") == "/usr/bin/python3"
    )
    assert workers_python({}, {}, "/venv/bin/python") == "/venv/bin/python"


class _Session:
    """What ``register`` asks of a session before it registers: its workers' Python and its settings."""

    def __init__(self, python_exec: str, conf: dict[str, str]) -> None:
        self.sparkContext = self
        self.pythonExec = python_exec
        self._conf = conf

    def getConf(self) -> dict[str, str]:
        return self._conf


def test_register_says_what_to_do_about_a_shipped_environment_and_an_ignored_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from storage_core.errors import ConfigError
    from storage_core.spark import register

    # Client mode with spark.archives: the driver plans with ./env/bin/python in its own directory.
    monkeypatch.chdir(tmp_path)
    assert is_relative("./env/bin/python") and not is_relative("python3") and not is_relative("/a/python")
    with pytest.raises(ConfigError) as err:
        register(_Session("./env/bin/python", {"spark.pyspark.python": "./env/bin/python"}))
    said = str(err.value)
    assert "relative to each process's working directory" in said and str(tmp_path) in said, said
    assert "unpack the same archive there" in said and "\n" not in said
    # spark.pyspark.python given to a session built in Python changes nothing: say so, name the variable.
    with pytest.raises(ConfigError, match=r"set PYSPARK_PYTHON=/opt/env/bin/python before the SparkSession"):
        register(_Session("python3", {"spark.pyspark.python": "/opt/env/bin/python"}))
