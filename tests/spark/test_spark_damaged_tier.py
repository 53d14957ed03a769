"""The Spark commands answer a damaged remote tier with one line too: ``export`` names the damaged segment
(a task's CorruptDataError used to reach the user as Spark's Java stack with a Python traceback inside),
``scrub`` reports the damage and exits 3. The tier and the damage: storage/damaged_tier.py."""

from __future__ import annotations

from pathlib import Path

from storage.damaged_tier import DAMAGE, TOPIC, make_tier

from harness.tierkeeper_cli import run_cli

SPARK = ["--spark-master", "local[1]"]


def _our_lines(stderr: str, verb: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"tierkeeper {verb}: ")]


def test_export_of_a_damaged_segment_fails_with_one_line_naming_it(tmp_path: Path) -> None:
    tier = make_tier(tmp_path)
    DAMAGE["segment"](tier)
    proc = run_cli(
        "export", "--remote", f"file://{tier}", "--topic", TOPIC, "--to", f"file://{tmp_path / 'out'}", *SPARK
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = _our_lines(proc.stderr, "export")
    assert "record batch CRC mismatch" in line and "offset=0" in line and ".log" in line, line
    assert not (tmp_path / "out" / "_tierkeeper" / "export-state.json").exists()  # nothing committed


def test_scrub_reports_a_damaged_index_and_segment(tmp_path: Path) -> None:
    tier = make_tier(tmp_path)
    DAMAGE["log-index-entry"](tier)  # an entry rewritten whole: only the marker's CRC tells
    DAMAGE["segment"](tier)
    proc = run_cli("scrub", "--remote", f"file://{tier}", "--json", *SPARK)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert ".remoteLogIndex" in proc.stdout and ".log" in proc.stdout, proc.stdout
