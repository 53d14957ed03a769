"""The recorded objects of the GitOps health checks and the table of states in docs/gitops.md."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.paths import REPO_ROOT

CUSTOMIZATIONS = REPO_ROOT / "gitops" / "argocd" / "resource_customizations" / "tierkeeper.io" / "_"
"""Argo CD's kind-wildcard directory: one health.lua and health_test.yaml for every kind of the group."""
HEALTH_SCRIPT = CUSTOMIZATIONS / "health.lua"
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


def recorded_objects(kind: str) -> Path:
    """The recorded objects of one kind (``testdata/<kind>/``)."""
    return CUSTOMIZATIONS / "testdata" / kind


def argo_cases(kind: str) -> list[ArgoCase]:
    """The cases of ``health_test.yaml`` (Argo CD's own test format) whose input is an object of ``kind``."""
    spec = yaml.safe_load((CUSTOMIZATIONS / "health_test.yaml").read_text())
    cases = [
        ArgoCase(
            kind=Path(case["inputPath"]).parent.name,
            input_path=CUSTOMIZATIONS / case["inputPath"],
            status=case["healthStatus"]["status"],
            message=case["healthStatus"]["message"],
        )
        for case in spec["tests"]
    ]
    return [case for case in cases if case.kind == kind]


def doc_rows() -> list[DocRow]:
    """Rows of the table of states: | state | `testdata file` | Argo CD | kstatus ... |."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and (match := re.fullmatch(r"`([\w.]+\.yaml)`", cells[1])):
            rows.append(DocRow(testdata=match.group(1), argocd=cells[2], kstatus=cells[3].split()[0]))
    return rows
