"""kstatus (the library behind Flux's health checks and kstatus-based waits), run as the real Go library
on the same recorded objects as the Argo CD checks, agrees with the table in docs/gitops.md."""

from __future__ import annotations

import pytest
from gitops_cases import CUSTOMIZATIONS, KINDS, doc_rows

from harness.kafka_dist import HarnessError
from harness.kstatus import kstatus_of

ROWS = doc_rows()


@pytest.mark.parametrize("kind", KINDS)
def test_kstatus_verdicts_match_the_docs(kind: str) -> None:
    files = sorted((CUSTOMIZATIONS / kind / "testdata").glob("*.yaml"))
    expected = {row.testdata: row.kstatus for row in ROWS}
    results = kstatus_of("\n---\n".join(f.read_text() for f in files))
    assert len(results) == len(files)
    verdicts = {f.name: r.status for f, r in zip(files, results)}
    assert verdicts == {f.name: expected[f.name] for f in files}
    assert all(r.kind == kind for r in results)


def test_stalled_message_reaches_kstatus() -> None:
    obj = (CUSTOMIZATIONS / "TieredTopic" / "testdata" / "degraded_stalled.yaml").read_text()
    (result,) = kstatus_of(obj)
    assert result.status == "Failed"
    assert "cleanup.policy=compact" in result.message


def test_generation_behind_wins_over_ready() -> None:
    obj = (CUSTOMIZATIONS / "TieredBroker" / "testdata" / "healthy_ready.yaml").read_text()
    (result,) = kstatus_of(obj.replace("generation: 2", "generation: 5", 1))
    assert result.status == "InProgress"
    assert "generation is 5" in result.message


def test_bad_input_is_a_one_line_error() -> None:
    with pytest.raises(HarnessError, match=r"kstatus: document 1: .*") as info:
        kstatus_of("kind: [unclosed")
    assert "\n" not in str(info.value).strip()
