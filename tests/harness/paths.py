"""Where the harness keeps downloads and binaries: a cache outside the repository, reused across runs."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """``$TIERKEEPER_CACHE`` or ``~/.cache/tierkeeper``; created on first use."""
    root = Path(os.environ.get("TIERKEEPER_CACHE") or Path.home() / ".cache" / "tierkeeper")
    root.mkdir(parents=True, exist_ok=True)
    return root
