"""The recorded objects of the GitOps health checks and the table of states in docs/gitops.md."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.paths import REPO_ROOT

CUSTOMIZATIONS = REPO_ROOT / "gitops" / "argocd" / "resource_customizations" / "tierkeeper.io"
KINDS = ("TieredTopic", "TieredBroker", "TieredCluster")
MEMBER_KINDS = ("TieredTopic", "TieredBroker")
"""The kinds with spec.paused (a TieredCluster is read live in tests/k8s/test_k8s_tiered_cluster.py)."""
DOC = REPO_ROOT / "docs" / "gitops.md"


@dataclass(frozen=True)
class ArgoCase:
    kind: str
    input_path: Path
    status: str
    message: str

    def object(self) -> dict[str, Any]:
        obj: dict[str, Any] = yaml.safe_load(self.input_path.read_text())
        return obj


@dataclass(frozen=True)
class DocRow:
    testdata: str
    argocd: str
    kstatus: str


def health_script(kind: str) -> Path:
    return CUSTOMIZATIONS / kind / "health.lua"


def argo_cases(kind: str) -> list[ArgoCase]:
    """The cases of ``<kind>/health_test.yaml``, in Argo CD's own test format."""
    spec = yaml.safe_load((CUSTOMIZATIONS / kind / "health_test.yaml").read_text())
    return [
        ArgoCase(
            kind=kind,
            input_path=CUSTOMIZATIONS / kind / case["inputPath"],
            status=case["healthStatus"]["status"],
            message=case["healthStatus"]["message"],
        )
        for case in spec["tests"]
    ]


def doc_rows() -> list[DocRow]:
    """Rows of the table of states: | state | `testdata file` | Argo CD | kstatus ... |."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and (match := re.fullmatch(r"`([\w.]+\.yaml)`", cells[1])):
            rows.append(DocRow(testdata=match.group(1), argocd=cells[2], kstatus=cells[3].split()[0]))
    return rows
