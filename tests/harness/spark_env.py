"""A packed Python environment for Spark's executors, as a user ships one with ``spark.archives``: a
virtualenv made with ``python -m venv --copies`` holding Tierkeeper (the package itself, not an editable
link to this checkout) and its runtime dependencies, packed as a ``.tar.gz`` whose top level is the
environment (``bin/python``, ``lib/python3.X/site-packages``), which is what ``venv-pack`` writes.

What is left out is what the workers' Spark provides: pyspark and py4j (Spark puts its own
``python/lib/pyspark.zip`` and py4j on its Python workers' path, as Spark's "Python Package Management"
guide packs only the job's own libraries). The dependencies are this venv's installed distributions,
found from ``tierkeeper``'s requirements (no extras), each with the files its RECORD lists (the
compiled ``__pycache__`` files included, as pip wrote them: without them every executor's first import
of numba, pyarrow... compiles them again, tens of seconds on a loaded machine); they are written into
the archive straight from where they are installed (no copy on disk first).

The interpreter in ``bin`` is a copy; like any virtualenv (and ``venv-pack``'s archives) it still uses
the base Python's standard library, so the nodes need that Python at the same path. The base Python here
has no pyarrow and no Tierkeeper, so an executor that imports them got them from the archive.
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import tarfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from harness.paths import REPO_ROOT

PROJECT = "tierkeeper"
FROM_SPARK = frozenset({"pyspark", "py4j"})
"""Distributions the workers' Spark puts on its Python workers' path."""
PACKAGES = ("storage_core", "pyspark_tierkeeper")
"""The project's packages the executors import (the operator's are not needed there)."""


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def runtime_distributions() -> list[metadata.Distribution]:
    """The installed distributions ``tierkeeper`` needs at run time (its requirements without extras,
    transitively), but pyspark and py4j."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [_name(r) for r in metadata.requires(PROJECT) or [] if "extra ==" not in r]
    while todo:
        name = todo.pop()
        if name in seen or name in FROM_SPARK:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python (its marker is false here)
        seen[name] = dist
        for req in dist.requires or []:
            if "extra ==" not in req.partition(";")[2]:
                todo.append(_name(req))
    return list(seen.values())


def _dist_files(dist: metadata.Distribution) -> Iterator[tuple[Path, str]]:
    """(installed file, its path relative to site-packages) for every file of ``dist`` under
    site-packages (scripts in ``bin`` are not needed by the executors)."""
    for f in dist.files or []:
        rel = str(f)
        if rel.startswith(".."):
            continue
        path = Path(str(dist.locate_file(f)))
        if path.is_file():
            yield path, rel


def _project_files() -> Iterator[tuple[Path, str]]:
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*")):
            if path.is_file():
                yield path, str(path.relative_to(REPO_ROOT))


def build(out: Path, workdir: Path) -> Path:
    """Pack the environment into ``out`` (a ``.tar.gz``); ``workdir`` holds the bare virtualenv."""
    venv = workdir / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--copies", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
        # The base interpreter's own venv module, not this venv's (a venv of a venv is one of the base).
        cwd=workdir,
    )
    site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    assert (venv / site).is_dir(), f"no {site} in {venv}"
    names: set[str] = set()
    # Level 1: the archive is made once per test run and unpacked at once; size matters less than time.
    with tarfile.open(out, "w:gz", compresslevel=1) as tar:
        tar.add(venv, arcname=".")
        for dist in runtime_distributions():
            for path, rel in _dist_files(dist):
                if rel not in names:
                    names.add(rel)
                    tar.add(path, arcname=f"{site}/{rel}")
        for path, rel in _project_files():
            tar.add(path, arcname=f"{site}/{rel}")
    return out


def base_python() -> str:
    """The interpreter this venv was made from (no Tierkeeper, no pyarrow)."""
    return str(Path(sysconfig.get_config_var("BINDIR")) / f"python{sys.version_info.major}")
