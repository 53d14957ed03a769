"""The Tierkeeper Kubernetes operator: the CRDs generated from the API models, the kopf handlers and the
Kubernetes adapters. The models and the reconcile planner live in the storage core (``storage_core.api``,
``storage_core.reconcile``) because ``tierkeeper standalone`` uses them too.

The source folder is ``operator/`` but the package is ``tierkeeper_operator``: a package named
``operator`` would shadow the standard library module of that name.

Layer: entry points (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""

from __future__ import annotations

from storage_core.api import API_VERSION, GROUP, VERSION

__all__ = ["API_VERSION", "GROUP", "VERSION"]
