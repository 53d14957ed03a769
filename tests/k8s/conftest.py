"""Fixtures for the Kubernetes side, on the harness's real control plane (``k8s_control_plane`` and
``k8s_namespace`` come from tests/conftest.py): the project's CRDs applied, and an admin client.

helm and kubectl need no fixture: ``harness.tools.run_tool`` unpacks them into the cache on first use.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness.control_plane import ControlPlane
from harness.k8s import load_crds


@pytest.fixture(scope="session")
def k8s_crds(k8s_control_plane: ControlPlane) -> ControlPlane:
    """The control plane with crds/*.yaml applied and Established (the same files the chart ships)."""
    k8s_control_plane.apply_crds(load_crds())
    return k8s_control_plane


@pytest.fixture
def kube_client(k8s_crds: ControlPlane) -> Iterator[Any]:
    """``kubernetes.client.ApiClient`` as admin on the control plane, with our CRDs served."""
    client = k8s_crds.api_client()
    try:
        yield client
    finally:
        client.close()
