"""``tierkeeper fetchers plan`` on assignment files, through the real console entry point."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fetchers import cli_run

from storage_core.fetchers.assignment_file import assignment_to_json
from storage_core.fetchers.model import Assignment
from storage_core.fetchers.placement import round_robin_placement
from storage_core.fetchers.planner import evaluate

LINE = Assignment(
    brokers=tuple(range(25)), topics={"line-traffic": round_robin_placement(list(range(25)), 40, 3, 0, 0)}
)


def tierkeeper(*args: str) -> subprocess.CompletedProcess[str]:
    """Run Tierkeeper's command line with ``args``, for at most 120 s."""
    return cli_run.tierkeeper(*args, timeout=120)


@pytest.fixture
def line_file(tmp_path: Path) -> Path:
    path = tmp_path / "line.json"
    path.write_text(json.dumps(assignment_to_json(LINE)))
    return path


def test_plan_json_reports_brokers_and_recommendation(line_file: Path) -> None:
    proc = tierkeeper("fetchers", "plan", "--assignment", str(line_file), "--fetchers", "5", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    expected = evaluate(LINE, 5)
    got = {b["broker"]: b for b in data["current"]["brokers"]}
    assert set(got) == set(range(25))
    for broker in expected.brokers:
        row = got[broker.broker]
        assert (row["idle_threads"], row["max_load"], row["mean_load"]) == (
            broker.idle_threads,
            broker.max_load,
            broker.mean_load,
        )
    rec = data["recommendation"]
    assert rec["fetchers"] != 5 and rec["worst_load"] == 1 and rec["perfect_groups"] == rec["groups"] == 65
    assert data["current"]["worst_load"] == 2 and data["current"]["perfect_groups"] == 50
    assert rec["steps"][-1] == rec["fetchers"]
    assert len(rec["explanations"]) == 25
    assert all("idle_threads" in b and "max_load" in b and "mean_load" in b for b in rec["brokers"])


def test_plan_text_and_bounds(line_file: Path) -> None:
    proc = tierkeeper(
        "fetchers", "plan", "--assignment", str(line_file), "--fetchers", "5", "--min", "6", "--max", "6"
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("current 5: busiest thread 2 partitions")
    assert lines[1].startswith("recommended 6: busiest thread 1 partitions")
    assert "steps: 5 -> 6" in lines
    assert sum(1 for line in lines if line.startswith("broker ")) == 25


def test_plan_defaults_to_kafkas_single_fetcher(line_file: Path) -> None:
    data = json.loads(tierkeeper("fetchers", "plan", "--assignment", str(line_file), "--json").stdout)
    assert data["current"]["fetchers"] == 1
    assert data["bounds"] == {"min": 1, "max": 16}


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{"brokers": [1], "topics": {"a": [[1, 9]]}}', "uses brokers [9] that are not in 'brokers'"),
        ("[1, 2", "not JSON"),
    ],
)
def test_bad_file_is_one_error_line(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    proc = tierkeeper("fetchers", "plan", "--assignment", str(path))
    assert proc.returncode == 1
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("tierkeeper fetchers: error: ") and fragment in line


def test_min_above_max_is_refused(line_file: Path) -> None:
    proc = tierkeeper("fetchers", "plan", "--assignment", str(line_file), "--min", "8", "--max", "4")
    assert proc.returncode == 1 and "--min 8 is above --max 4" in proc.stderr


@pytest.mark.parametrize("flag", ["--fetchers", "--min", "--max"])
def test_a_count_below_one_is_refused(line_file: Path, flag: str) -> None:
    proc = tierkeeper("fetchers", "plan", "--assignment", str(line_file), flag, "0")
    assert proc.returncode == 1
    assert f"{flag} must be >= 1, got 0" in proc.stderr


def test_source_is_required() -> None:
    proc = tierkeeper("fetchers", "plan")
    assert proc.returncode == 2 and "--bootstrap-servers" in proc.stderr
