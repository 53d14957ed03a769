"""Fixtures for the Kubernetes side: the kmock API emulator with our CRDs, and a client for it.

helm and kubectl need no fixture: ``harness.tools.run_tool`` unpacks them into the cache on first use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.k8s import KubeApiServer, load_crds


@pytest.fixture
def kube_api(tmp_path: Path) -> Iterator[KubeApiServer]:
    """A fresh emulated API server per test, with tieredtopics/tieredbrokers served."""
    server = KubeApiServer(tmp_path / "kube-api", crds=load_crds()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube_client(kube_api: KubeApiServer) -> Iterator[Any]:
    """``kubernetes.client.ApiClient`` bound to ``kube_api`` through its kubeconfig."""
    client = kube_api.api_client()
    try:
        yield client
    finally:
        client.close()
