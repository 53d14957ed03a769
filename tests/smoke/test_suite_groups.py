"""`make test`'s two groups (tests/run_suite.py) run every test exactly once."""

from __future__ import annotations

from pathlib import Path

import run_suite

ROOT = Path(__file__).resolve().parents[2]


def test_the_control_plane_group_names_existing_disjoint_paths() -> None:
    paths = [ROOT / p for p in run_suite.CONTROL_PLANE_GROUP]
    assert all(p.exists() for p in paths), [str(p) for p in paths if not p.exists()]
    # One path inside another would run its tests twice in that group.
    nested = [(a, b) for a in paths for b in paths if a != b and b.is_relative_to(a)]
    assert nested == []


def test_the_data_group_runs_the_rest_and_both_get_the_extra_arguments(tmp_path: Path) -> None:
    data, control_plane = run_suite._groups(["-x", "--durations=5"], tmp_path)
    ignored = {a.removeprefix("--ignore=") for a in data.args if a.startswith("--ignore=")}
    assert ignored == set(run_suite.CONTROL_PLANE_GROUP)
    assert "tests" in data.args and "tests" not in control_plane.args
    assert set(run_suite.CONTROL_PLANE_GROUP) <= set(control_plane.args)
    for group in (data, control_plane):
        assert group.args[group.args.index("-x") + 1] == "--durations=5"
    assert data.log is None and control_plane.log == tmp_path / "control-plane.log"
