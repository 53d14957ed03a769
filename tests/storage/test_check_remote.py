"""``tierkeeper check-remote`` (a TieredCluster's bucket-check Job): a reachable tier passes with its probe
written and deleted; a missing one fails with one line, and both leave their verdict in the result file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage_core.cli.check_remote import PROBE
from storage_core.cli.main import main


def test_a_reachable_tier_passes_and_leaves_nothing(tmp_path: Path) -> None:
    tier, result = tmp_path / "tier", tmp_path / "result"
    tier.mkdir()
    assert main(["check-remote", "--remote", f"file://{tier}", "--result-file", str(result)]) == 0
    verdict = json.loads(result.read_text())
    assert verdict["reachable"] is True and PROBE in verdict["message"]
    assert list(tier.iterdir()) == []


def test_a_missing_tier_fails_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = tmp_path / "result"
    missing = tmp_path / "missing"
    assert main(["check-remote", "--remote", f"file://{missing}", "--result-file", str(result)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not exist" in err, err
    verdict = json.loads(result.read_text())
    assert (
        verdict == {"reachable": False, "message": verdict["message"]}
        and "does not exist" in verdict["message"]
    )
