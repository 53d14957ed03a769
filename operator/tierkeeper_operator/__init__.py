"""The Tierkeeper Kubernetes operator: custom resources, their CRDs, and the kopf handlers.

The source folder is ``operator/`` but the package is ``tierkeeper_operator``: a package named
``operator`` would shadow the standard library module of that name.
"""

from __future__ import annotations

GROUP = "tierkeeper.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
