"""A Spark session whose Python workers run an interpreter without Tierkeeper (PYSPARK_PYTHON unset and
the virtualenv not on PATH: workers run ``python3`` from PATH) fails saying what to set, at
``register`` before any worker starts, and in the worker's own import of ``pyspark_tierkeeper``.

Real parts: a bare virtualenv made by the test (no packages), the interpreter Spark would run."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from storage_core.spark.worker_python import problem

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
