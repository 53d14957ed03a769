"""Argo CD health checks of TieredTopic, TieredBroker and TieredCluster, run in a real Lua 5.1 interpreter as
Argo CD runs them, against Argo CD's own health_test.yaml format; and the table in docs/gitops.md agrees."""

from __future__ import annotations

from pathlib import Path

import pytest
from gitops_cases import CUSTOMIZATIONS, KINDS, ArgoCase, argo_cases, doc_rows, health_script

from harness.argocd_lua import STATUSES, HealthScriptError, run_health

CASES = [case for kind in KINDS for case in argo_cases(kind)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.kind}/{c.input_path.name}")
def test_health_matches_health_test_yaml(case: ArgoCase) -> None:
    health = run_health(health_script(case.kind), case.object())
    assert health == {"status": case.status, "message": case.message}


@pytest.mark.parametrize("kind", KINDS)
def test_every_testdata_file_has_a_case_and_every_case_a_file(kind: str) -> None:
    on_disk = {p.name for p in (CUSTOMIZATIONS / kind / "testdata").glob("*.yaml")}
    in_test = {case.input_path.name for case in argo_cases(kind)}
    assert on_disk == in_test
    for case in argo_cases(kind):
        assert case.object()["kind"] == kind, case.input_path
        assert case.status in STATUSES
        # Argo CD's convention: the file name starts with the expected status.
        assert case.input_path.name.lower().startswith(case.status.lower() + "_"), case.input_path.name


def test_the_kinds_share_one_script() -> None:
    assert len({health_script(kind).read_text() for kind in KINDS}) == 1


def test_docs_table_matches_argocd_expectations() -> None:
    rows = doc_rows()
    assert rows, "no table of states found in docs/gitops.md"
    for kind in KINDS:
        expected = {case.input_path.name: case.status for case in argo_cases(kind)}
        documented = {row.testdata: row.argocd for row in rows if row.testdata in expected}
        assert documented == expected, kind
    all_files = {case.input_path.name for case in CASES}
    assert {row.testdata for row in rows} == all_files


def test_observed_generation_is_checked_before_conditions() -> None:
    # A Stalled verdict about an older spec must not mark the new spec Degraded.
    obj = ArgoCase(
        "TieredTopic", CUSTOMIZATIONS / "TieredTopic/testdata/degraded_stalled.yaml", "", ""
    ).object()
    obj["metadata"]["generation"] = 2
    assert run_health(health_script("TieredTopic"), obj)["status"] == "Progressing"


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
