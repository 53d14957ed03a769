"""The console script answers --help and --version."""

from __future__ import annotations

import subprocess
import sys

from storage_core import __version__


def test_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "storage_core.cli", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"tierkeeper {__version__}"


def test_help_lists_usage() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "storage_core.cli", "--help"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: tierkeeper")
