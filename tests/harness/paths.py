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


def strimzi_dir() -> Path:
    """Strimzi's CRDs and examples (../shared/strimzi beside the checkout): ``$TIERKEEPER_STRIMZI``, else
    the checkout's sibling ``shared/strimzi``, else the workplace's ``/work/shared/strimzi`` (a clone made
    elsewhere, such as a clean clone in /tmp, has no sibling)."""
    override = os.environ.get("TIERKEEPER_STRIMZI")
    if override:
        return Path(override)
    beside = REPO_ROOT.parent / "shared" / "strimzi"
    return beside if beside.is_dir() else Path("/work/shared/strimzi")
