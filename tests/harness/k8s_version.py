"""The one pin of the Kubernetes version the harness builds and runs (apiserver, controller-manager).

Changing it makes the next ``make harness`` build the new version into its own cache directory.
"""

from __future__ import annotations

KUBERNETES_VERSION = "v1.33.0"


def staging_version(version: str = KUBERNETES_VERSION) -> str:
    """The tag of the ``k8s.io/<name>`` staging modules released with ``version`` (v1.33.0 -> v0.33.0)."""
    major, minor, patch = version.lstrip("v").split(".")
    if major != "1":
        raise ValueError(f"unexpected Kubernetes version {version!r}: staging tags exist for 1.x only")
    return f"v0.{minor}.{patch}"
