"""The Prometheus rules checker (tests/promrules/): Prometheus's own PromQL parser and duration and
label rules, run over the PrometheusRule objects of rendered YAML (the chart's alerts)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.go_build import go_binary
from harness.paths import REPO_ROOT

SOURCE = REPO_ROOT / "tests" / "promrules"


@dataclass(frozen=True)
class RulesReport:
    ok: list[str]
    """``group/alert`` of every rule that passed."""
    problems: list[str]
    """One line per problem (empty when every rule passed)."""


def promrules_binary() -> Path:
    return go_binary(SOURCE, "promrules")


def check_rules(documents: str) -> RulesReport:
    proc = subprocess.run(
        [str(promrules_binary())], input=documents, capture_output=True, text=True, timeout=60, check=False
    )
    ok = [line.removeprefix("ok ") for line in proc.stdout.splitlines() if line.startswith("ok ")]
    problems = proc.stderr.splitlines() if proc.returncode != 0 else []
    if proc.returncode != 0 and not problems:
        problems = [f"promrules exited with {proc.returncode}"]
    return RulesReport(ok=ok, problems=problems)


if __name__ == "__main__":
    print(promrules_binary())
