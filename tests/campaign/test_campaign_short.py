"""The short campaign CI runs: two rounds of a fixed seed over the real system (3 brokers, moto S3 behind
the fault proxy, the reconciler killed at named points, the gateway restarted), every acknowledged record
checked through the gateway and the tier. ``make campaign`` runs long ones."""

from __future__ import annotations

from pathlib import Path

from campaign.checker import CHANGED, LOST
from campaign.plan import KINDS
from campaign.runner import check_round, run_campaign
from campaign.system import CampaignSystem
from harness.moto_s3 import MotoServer

SEED = 3
"""Its two rounds draw five of the six fault kinds (all but a broker SIGKILL, which longer runs cover; see
docs/reliability.md)."""


def test_a_short_campaign_loses_and_duplicates_nothing(moto_server: MotoServer, tmp_path: Path) -> None:
    system = CampaignSystem.start(tmp_path / "system", moto_server)
    rows: list[dict[str, object]] = []
    try:
        results = run_campaign(
            system, seed=SEED, rounds=2, steps=2, faults=3, out=rows.append, shrink_budget=0, retire=False
        )
        assert [r.ok for r in results] == [True, True], rows
        injected = {f.kind for r in results for f in r.plan.faults}
        assert len(injected) >= len(KINDS) - 1, injected
        for result in results:
            acked = sum(len(v) for (topic, _), v in system.ledger.acked.items() if topic in result.topics)
            assert result.records_checked >= 2 * acked, (result.records_checked, acked)

        # The check can fail: a ledger that says otherwise than the real reads yields findings.
        first = results[0]
        tp = (first.topics[0], 0)
        offsets = sorted(system.ledger.acked[tp])
        system.ledger.acked[tp][offsets[0]] = b"not what was written"
        system.ledger.acked[tp][offsets[-1] + 10_000] = b"never written"
        kinds = {f.kind for f in check_round(system, first)}
        assert kinds == {CHANGED, LOST}, kinds
    finally:
        system.stop()
