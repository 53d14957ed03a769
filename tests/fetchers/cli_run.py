"""Tierkeeper's command line run from this checkout, as the fetcher tests call it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def tierkeeper(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``python -m storage_core.cli`` with ``args`` from the repository root, unchecked."""
    # This checkout first on the path: the tests exercise its code, not an installed copy.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "storage_core.cli", *args]
    return subprocess.run(
        command, capture_output=True, text=True, check=False, cwd=REPO, env=env, timeout=timeout
    )
