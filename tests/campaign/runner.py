"""Rounds of the campaign: produce, fail, reconcile, then check every promise; and the command behind
``make campaign ROUNDS=N SEED=S``.

A round works on topics of its own, so a failing round's faults can be replayed (shrunk) on fresh topics of
the same running system. Every step is a fixed amount of acknowledged work followed by one reconcile round,
and each fault happens at a step: nothing depends on how fast the machine is.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from campaign.checker import NOT_SETTLED, UNREADABLE, Finding, check, summary
from campaign.ledger import Ledger
from campaign.plan import (
    BROKER_KILL,
    GATEWAY_RESTART,
    LEADER_CHANGE,
    RECONCILER_KILL,
    S3_ERRORS,
    S3_OUTAGE,
    Fault,
    RoundPlan,
    plan_round,
)
from campaign.shrink import shrink
from campaign.system import PARTITIONS, S3_ERROR_PLAN, S3_OUTAGE_PLAN, CampaignSystem
from harness.s3_faults import FaultPlan

RECORDS_PER_STEP = 1500
TXN_RECORDS_PER_STEP = 600
SETTLE_ROUNDS = 6
"""Fault-free reconcile rounds allowed after the last step for the tier to catch up and every topic to be
Ready; a topic still not Ready after them is a finding (an honest condition is expected to clear)."""


@dataclass
class RoundResult:
    plan: RoundPlan
    topics: tuple[str, ...]
    events: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    records_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    def report(self) -> dict[str, object]:
        return {
            "seed": self.plan.seed,
            "round": self.plan.round_no,
            "faults": [f.describe() for f in self.plan.faults],
            "events": self.events,
            "records_checked": self.records_checked,
            "findings": summary(self.findings),
            "first_findings": [f.describe() for f in self.findings[:10]],
        }


def run_round(system: CampaignSystem, plan: RoundPlan, *, suffix: str = "") -> RoundResult:
    name = f"c{plan.seed}-r{plan.round_no}{suffix}"
    plain, txn = f"{name}-plain", f"{name}-txn"
    system.create_topics(plain, txn)
    result = RoundResult(plan, (plain, txn))
    next_id = 0
    for step in range(plan.steps):
        faults = plan.at(step)
        restart = [
            f.target for f in faults if f.kind in (BROKER_KILL, LEADER_CHANGE) and f.target is not None
        ]
        for fault in faults:
            _inject(system, fault)
            result.events.append(fault.describe())
        system.produce(plain, next_id, RECORDS_PER_STEP)
        system.produce_transactions(txn, next_id, TXN_RECORDS_PER_STEP, f"{name}-producer")
        next_id += RECORDS_PER_STEP
        kill = next((f for f in faults if f.kind == RECONCILER_KILL), None)
        reconciled = system.reconcile(fault=f"{kill.point}:{kill.nth}" if kill else None)
        print(f"{name} step {step}: reconcile exit {reconciled.returncode}", file=sys.stderr, flush=True)
        if kill is not None and reconciled.killed_at is None:
            result.events.append(
                f"step {step}: {kill.point}:{kill.nth} not reached (exit {reconciled.returncode})"
            )
        else:
            result.events.append(f"step {step}: reconcile exit {reconciled.returncode}")
        system.set_s3_plan(FaultPlan())
        for broker in restart:
            system.cluster.start_broker(broker)
        if any(f.kind == GATEWAY_RESTART for f in faults):
            system.start_gateway()
    result.findings += _settle(system, result)
    result.findings += check_round(system, result)
    return result


def _inject(system: CampaignSystem, fault: Fault) -> None:
    if fault.kind == BROKER_KILL:
        assert fault.target is not None
        system.cluster.stop_broker(fault.target, kill=True)
    elif fault.kind == LEADER_CHANGE:
        assert fault.target is not None
        system.cluster.stop_broker(fault.target)  # graceful: its leaderships move to the others
    elif fault.kind == GATEWAY_RESTART:
        system.kill_gateway()
    elif fault.kind == S3_ERRORS:
        system.set_s3_plan(S3_ERROR_PLAN)
    elif fault.kind == S3_OUTAGE:
        system.set_s3_plan(S3_OUTAGE_PLAN)
    # RECONCILER_KILL acts through the step's reconcile round.


def _settle(system: CampaignSystem, result: RoundResult) -> list[Finding]:
    last = None
    for attempt in range(SETTLE_ROUNDS):
        last = system.reconcile()
        ready = last.returncode == 0
        trimmed = all(
            start > 0 for topic in result.topics for start in system.log_start_offsets(topic).values()
        )
        if ready and trimmed:
            result.events.append(f"settled after {attempt + 1} fault-free reconcile rounds")
            return []
    assert last is not None
    conditions = {
        key: [c for c in status.get("conditions", []) if c.get("status") == "True"]
        for key, status in last.statuses.items()
    }
    detail = f"exit {last.returncode}; conditions {conditions}; {last.stderr[-500:]}"
    return [Finding(NOT_SETTLED, result.topics[0], -1, -1, detail)]


def check_round(system: CampaignSystem, result: RoundResult) -> list[Finding]:
    """Every promise over the round's topics: through the gateway from offset 0 (read_committed and
    read_uncommitted), and the tier alone through ``tierkeeper read``."""
    findings: list[Finding] = []
    plain, txn = result.topics
    for topic, read_committed in ((plain, True), (txn, True), (txn, False)):
        try:
            read = system.read_through_gateway(topic, read_committed=read_committed)
        except AssertionError as error:  # an error the client saw is a finding, and the campaign goes on
            findings.append(Finding(UNREADABLE, topic, -1, -1, str(error)[:2000]))
            continue
        result.records_checked += len(read)
        findings += check(system.ledger, read, read_committed=read_committed, topics=[topic])
    # The tier alone (``tierkeeper read``): everything acknowledged up to its last record is there.
    for topic in (plain, txn):
        for partition in range(PARTITIONS):
            tiered = system.read_tier(topic, partition)
            result.records_checked += len(tiered)
            end = max((r.offset for r in tiered), default=-1)
            upto = Ledger(aborted=system.ledger.aborted)
            upto.acked[(topic, partition)] = {
                o: v for o, v in system.ledger.acked[(topic, partition)].items() if o <= end
            }
            findings += check(upto, tiered, read_committed=True, topics=[topic])
    return findings


def _replayer(system: CampaignSystem, plan: RoundPlan) -> Callable[[tuple[Fault, ...]], bool]:
    """Whether a round with only some of ``plan``'s faults still fails, replayed on fresh topics."""
    replays = iter(range(1, 1 << 30))

    def fails(subset: tuple[Fault, ...]) -> bool:
        replay = RoundPlan(plan.seed, plan.round_no, plan.steps, subset)
        return not run_round(system, replay, suffix=f"-x{next(replays)}").ok

    return fails


def run_campaign(
    system: CampaignSystem,
    *,
    seed: int,
    rounds: int,
    steps: int,
    faults: int,
    out: Callable[[dict[str, object]], None],
    shrink_budget: int = 8,
    retire: bool = True,
    first_round: int = 0,
) -> list[RoundResult]:
    results = []
    for round_no in range(first_round, first_round + rounds):
        plan = plan_round(seed, round_no, steps=steps, brokers=tuple(system.cluster.node_ids), faults=faults)
        started = time.monotonic()
        result = run_round(system, plan)
        row = result.report()
        row["seconds"] = round(time.monotonic() - started, 1)
        if not result.ok:
            fails = _replayer(system, plan)
            shortest = shrink(plan.faults, fails, budget=shrink_budget)
            row["shortest_history"] = RoundPlan(seed, round_no, steps, shortest).history()
        out(row)
        results.append(result)
        if retire:
            system.retire(*result.topics)
    return results


def main(argv: list[str] | None = None) -> int:
    from harness.moto_s3 import MotoServer

    parser = argparse.ArgumentParser(prog="make campaign", description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--first-round", type=int, default=0, help="replay a seed's rounds from this one")
    parser.add_argument("--steps", type=int, default=3, help="produce + reconcile steps per round")
    parser.add_argument("--faults", type=int, default=3, help="faults drawn per round")
    parser.add_argument("--workdir", type=Path, default=Path("campaign-run"))
    parser.add_argument("--report", type=Path, help="append one JSON line per round here")
    args = parser.parse_args(argv)
    moto = MotoServer(args.workdir / "moto").start()
    system = CampaignSystem.start(args.workdir / "system", moto)

    def out(row: dict[str, object]) -> None:
        line = json.dumps(row)
        print(line, flush=True)
        if args.report:
            with args.report.open("a") as report:
                report.write(line + "\n")

    try:
        results = run_campaign(
            system,
            seed=args.seed,
            rounds=args.rounds,
            first_round=args.first_round,
            steps=args.steps,
            faults=args.faults,
            out=out,
        )
    finally:
        system.stop()
        moto.stop()
    failed = [r for r in results if not r.ok]
    checked = sum(r.records_checked for r in results)
    print(
        f"campaign seed {args.seed}: {len(results)} rounds, {checked} records checked, {len(failed)} failed"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
