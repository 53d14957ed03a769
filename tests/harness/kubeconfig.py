"""Kubeconfig files for the harness control plane: one cluster entry, a bearer token, a default namespace."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml


def write_kubeconfig(
    path: Path, *, server: str, ca_cert: Path, token: str, namespace: str = "default"
) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "harness",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_cert.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": "harness", "user": {"token": token}}],
        "contexts": [
            {"name": "harness", "context": {"cluster": "harness", "user": "harness", "namespace": namespace}}
        ],
        "current-context": "harness",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    path.chmod(0o600)
    return path
