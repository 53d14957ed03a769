"""Argo CD health checks of TieredTopic, TieredBroker and TieredCluster, run in a real Lua 5.1 interpreter as
Argo CD runs them, against Argo CD's own health_test.yaml format; and the table in docs/gitops.md agrees."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from gitops_cases import (
    CUSTOMIZATIONS,
    DOC,
    HEALTH_SCRIPT,
    KINDS,
    ArgoCase,
    argo_cases,
    doc_rows,
    recorded_objects,
)

from harness.argocd_lua import STATUSES, HealthScriptError, run_health
from harness.paths import REPO_ROOT

CASES = [case for kind in KINDS for case in argo_cases(kind)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.kind}/{c.input_path.name}")
def test_health_matches_health_test_yaml(case: ArgoCase) -> None:
    health = run_health(HEALTH_SCRIPT, case.object())
    assert health == {"status": case.status, "message": case.message}


@pytest.mark.parametrize("kind", KINDS)
def test_every_testdata_file_has_a_case_and_every_case_a_file(kind: str) -> None:
    on_disk = {p.name for p in recorded_objects(kind).glob("*.yaml")}
    in_test = {case.input_path.name for case in argo_cases(kind)}
    assert on_disk == in_test
    for case in argo_cases(kind):
        assert case.object()["kind"] == kind, case.input_path
        assert case.status in STATUSES
        # Argo CD's convention: the file name starts with the expected status.
        assert case.input_path.name.lower().startswith(case.status.lower() + "_"), case.input_path.name


def test_every_case_is_of_a_known_kind() -> None:
    # A case filed under a misspelt kind directory would be left out of every per-kind test above.
    spec = yaml.safe_load((CUSTOMIZATIONS / "health_test.yaml").read_text())
    assert len(spec["tests"]) == len(CASES)
    assert {p.name for p in (CUSTOMIZATIONS / "testdata").iterdir()} == set(KINDS)


def test_docs_table_matches_argocd_expectations() -> None:
    rows = doc_rows()
    assert rows, "no table of states found in docs/gitops.md"
    for kind in KINDS:
        expected = {case.input_path.name: case.status for case in argo_cases(kind)}
        documented = {row.testdata: row.argocd for row in rows if row.testdata in expected}
        assert documented == expected, kind
    all_files = {case.input_path.name for case in CASES}
    assert {row.testdata for row in rows} == all_files


def test_the_documented_patch_installs_the_one_script_under_every_kind() -> None:
    # The Python that docs/gitops.md pipes into `kubectl patch`, run as a user runs it from a checkout.
    (program,) = re.findall(r"<<'PY'\n(.*?)\nPY\n", DOC.read_text(), flags=re.S)
    out = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    data = json.loads(out.stdout)["data"]
    assert data == {
        f"resource.customizations.health.tierkeeper.io_{kind}": HEALTH_SCRIPT.read_text() for kind in KINDS
    }


def test_observed_generation_is_checked_before_conditions() -> None:
    # A Stalled verdict about an older spec must not mark the new spec Degraded.
    obj = ArgoCase("TieredTopic", recorded_objects("TieredTopic") / "degraded_stalled.yaml", "", "").object()
    obj["metadata"]["generation"] = 2
    assert run_health(HEALTH_SCRIPT, obj)["status"] == "Progressing"


def test_script_limited_to_what_argocd_opens(tmp_path: Path) -> None:
    # The runner gives scripts only Lua's base and table libraries, as Argo CD does: a script that
    # used string.find would work in a plain Lua but fail in Argo CD, and must fail here too.
    script = tmp_path / "health.lua"
    script.write_text('local hs = {}\nhs.status = "Healthy"\nhs.message = string.upper("x")\nreturn hs\n')
    with pytest.raises(HealthScriptError, match="string"):
        run_health(script, {"metadata": {"name": "x"}})


def test_unknown_status_is_rejected(tmp_path: Path) -> None:
    script = tmp_path / "health.lua"
    script.write_text('return {status = "Fine", message = "x"}\n')
    with pytest.raises(HealthScriptError, match="Fine"):
        run_health(script, {})
