"""Rounds of the campaign: produce, fail, reconcile, then check every promise; and the command behind
``make campaign ROUNDS=N SEED=S``.

A round works on topics of its own, so a failing round's faults can be replayed (shrunk) on fresh topics of
the same running system. Every step is a fixed amount of acknowledged work followed by one reconcile round,
and each fault happens at a step: nothing depends on how fast the machine is.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from campaign.checker import (
    BROKER_NOT_REJOINED,
    LOST,
    NOT_SETTLED,
    OLD_INCARNATION,
    ORPHAN,
    RETAINED,
    TIER_NOT_DELETED,
    UNREADABLE,
    Finding,
    check,
    check_retention,
    retention_prefix,
    summary,
)
from campaign.ledger import Ledger
from campaign.operator_mode import OperatorSystem
from campaign.plan import (
    BROKER_KILL,
    BROKER_WIPE,
    CLOCK_JUMP,
    EXTRA_RATE,
    GATEWAY_RESTART,
    LEADER_CHANGE,
    OPERATOR_KILL,
    OPERATOR_KINDS,
    OPERATOR_RATE,
    RECONCILER_KILL,
    S3_ERRORS,
    S3_OUTAGE,
    TOPIC_RECREATE,
    Fault,
    RoundPlan,
    plan_round,
)
from campaign.shrink import shrink
from campaign.system import (
    PARTITIONS,
    REMOTE_RETENTION_BYTES,
    REMOTE_RETENTION_MS,
    S3_ERROR_PLAN,
    S3_OUTAGE_PLAN,
    CampaignSystem,
)
from harness.s3_faults import FaultPlan

RECORDS_PER_STEP = 1500
TXN_RECORDS_PER_STEP = 600
RETENTION_RECORDS_PER_STEP = 900
"""About 80 KB per partition and step: every round's retention topic outgrows its remote size window."""
CLOCK_BEHIND_MS = 2 * REMOTE_RETENTION_MS
"""How far the producers' clock is behind before a clock jump: records stamped then are expired at once."""
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
    deleting: str | None = None
    """The topic whose TieredTopic (``deletionPolicy: Delete``) the round deletes (operator mode)."""

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
    plain, txn, kept = f"{name}-plain", f"{name}-txn", f"{name}-ret"
    delete = plan.deleted_topic()
    gone = f"{name}-del" if delete else None
    extra = (gone,) if gone else ()
    system.create_topics(plain, txn, kept, *extra, retention=(kept,), delete_policy=extra)
    result = RoundResult(plan, (plain, txn, kept), deleting=gone)
    jump = next((f.step for f in plan.faults if f.kind == CLOCK_JUMP), None)
    next_id = 0
    for step in range(plan.steps):
        faults = plan.at(step)
        restart = [
            f.target
            for f in faults
            if f.kind in (BROKER_KILL, LEADER_CHANGE, BROKER_WIPE) and f.target is not None
        ]
        wiped = [f.target for f in faults if f.kind == BROKER_WIPE and f.target is not None]
        for fault in faults:
            _inject(system, fault, result)
            result.events.append(fault.describe())
        system.produce(plain, next_id, RECORDS_PER_STEP)
        system.produce_transactions(txn, next_id, TXN_RECORDS_PER_STEP, f"{name}-producer")
        behind = CLOCK_BEHIND_MS if jump is not None and step < jump else 0
        system.produce(kept, next_id, RETENTION_RECORDS_PER_STEP, timestamp=_now_ms() - behind)
        if gone and delete and step <= delete.step:
            system.produce(gone, next_id, RECORDS_PER_STEP)
            if step == delete.step:
                assert delete.point is not None
                result.events.append(f"step {step}: " + system.delete_tiered_topic(gone, delete.point))
        next_id += RECORDS_PER_STEP
        kill = next((f for f in faults if f.kind == RECONCILER_KILL), None)
        operator_kill = next((f for f in faults if f.kind == OPERATOR_KILL), None)
        reconciled = system.reconcile(
            fault=f"{kill.point}:{kill.nth}" if kill else None,
            kill_operator_at=operator_kill.point if operator_kill else None,
        )
        result.events += [f"step {step}: {event}" for event in reconciled.events]
        print(f"{name} step {step}: reconcile exit {reconciled.returncode}", file=sys.stderr, flush=True)
        if kill is not None and reconciled.killed_at is None:
            result.events.append(
                f"step {step}: {kill.point}:{kill.nth} not reached (exit {reconciled.returncode})"
            )
        else:
            result.events.append(f"step {step}: reconcile exit {reconciled.returncode}")
        system.set_s3_plan(FaultPlan())
        for broker in wiped:  # before the broker starts, as its pod's init container
            restored = system.rebuild_broker(broker)
            result.events.append(f"step {step}: broker {broker} rebuilt: {_restored(restored)}")
        for broker in restart:
            system.cluster.start_broker(broker)
        for broker in wiped:
            missing = system.wait_in_isr(broker, list(result.topics))
            if missing:
                result.findings.append(Finding(BROKER_NOT_REJOINED, result.topics[0], -1, -1, missing))
            else:
                system.elect_preferred_leaders(list(result.topics))
                result.events.append(
                    f"step {step}: broker {broker} back in every ISR, preferred leaders elected"
                )
        if any(f.kind == GATEWAY_RESTART for f in faults):
            system.start_gateway()
    result.findings += _settle(system, result)
    # Before the operator is scaled down: the deleted TieredTopic must go (its delete Job succeeded).
    result.findings += [
        Finding(TIER_NOT_DELETED, topic, -1, -1, why)
        for topic, why in system.wait_tiered_topics_gone().items()
    ]
    system.quiesce()
    result.findings += check_round(system, result)
    return result


def _now_ms() -> int:
    return int(time.time() * 1000)


def _restored(summary: dict[str, object]) -> str:
    partitions = summary.get("partitions")
    return f"{len(partitions)} partitions" if isinstance(partitions, list) else str(summary)[:200]


def _inject(system: CampaignSystem, fault: Fault, result: RoundResult) -> None:
    if fault.kind == BROKER_WIPE:
        assert fault.target is not None
        system.cluster.stop_broker(fault.target, kill=True)
        system.cluster.wipe_log_dir(fault.target)  # meta.properties stays: a new disk formatted for it
    elif fault.kind == TOPIC_RECREATE:
        old_id = system.recreate_topic(result.topics[0])
        result.events.append(f"step {fault.step}: {result.topics[0]} incarnation {old_id} deleted")
    elif fault.kind == BROKER_KILL:
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
    # RECONCILER_KILL acts through the step's reconcile round, CLOCK_JUMP through the stamps of its step.


def _settle(system: CampaignSystem, result: RoundResult) -> list[Finding]:
    last = None
    for attempt in range(SETTLE_ROUNDS):
        last = system.reconcile()
        ready = last.returncode == 0
        due = result.topics[1:] if result.plan.recreated_last() else result.topics
        trimmed = all(start > 0 for topic in due for start in system.log_start_offsets(topic).values())
        if ready and trimmed:
            result.events.append(f"settled after {attempt + 1} fault-free reconcile rounds")
            return []
    assert last is not None
    conditions = {
        key: [c for c in status.get("conditions", []) if c.get("status") == "True"]
        for key, status in last.statuses.items()
    }
    starts = {topic: system.log_start_offsets(topic) for topic in result.topics}
    detail = f"exit {last.returncode}; log starts {starts}; conditions {conditions}; {last.stderr[-500:]}"
    return [Finding(NOT_SETTLED, result.topics[0], -1, -1, detail)]


def check_round(system: CampaignSystem, result: RoundResult) -> list[Finding]:
    """Every promise over the round's topics: no object unreferenced after the orphan sweep; remote
    retention held to its window; through the gateway from offset 0 (the retention topic from its earliest)
    under read_committed and read_uncommitted; the tier alone through ``tierkeeper read`` (and the Spark
    source when the system has a session); a deleted incarnation's tier kept whole."""
    findings: list[Finding] = []
    plain, txn, kept = result.topics
    # The orphan sweep, then no object of the round's topics (any incarnation) unreferenced by metadata;
    # the reads below prove the sweep took nothing still needed.
    # The CLI runs below are independent processes (one topic's sweep, one partition's read): side by side.
    with concurrent.futures.ThreadPoolExecutor(max_workers=PARTITIONS) as pool:
        list(pool.map(system.sweep, result.topics))
    for topic in result.topics:
        findings += [Finding(ORPHAN, topic, -1, -1, key) for key in system.unreferenced_objects(topic)]
    # Remote retention: one pass between two clock readings; what it deleted is checked against the
    # window computed from the producer's stamps and the bucket's sizes.
    settled_at = system.reconcile_started_ms
    before = system.served_segments(kept)
    started = _now_ms()
    system.cleanup_retention(kept)
    finished = _now_ms()
    after = system.served_segments(kept)
    retained_from: dict[tuple[str, int], int] = {}
    """Per partition of the retention topic, the lowest offset a gateway read must still show."""
    tier_from: dict[tuple[str, int], int] = {}
    """The same for the tier alone: the first offset the retention window keeps."""
    log_starts = system.log_start_offsets(kept)
    for partition in range(PARTITIONS):
        found, window_from = check_retention(
            kept,
            partition,
            before[partition],
            after[partition],
            system.ledger.timestamps[(kept, partition)],
            retention_ms=REMOTE_RETENTION_MS,
            retention_bytes=REMOTE_RETENTION_BYTES,
            started_ms=started,
            finished_ms=finished,
        )
        findings += found
        # What the reconciler's own last cleanup left: nothing that was expired when it began.
        stale = retention_prefix(
            before[partition],
            system.ledger.timestamps[(kept, partition)],
            retention_ms=REMOTE_RETENTION_MS,
            retention_bytes=REMOTE_RETENTION_BYTES,
            now_ms=settled_at,
            unknown_expired=False,
        )
        if stale:
            first, last, _ = before[partition][stale - 1]
            detail = f"the reconciler kept {stale} expired segments, up to {first}..{last}"
            findings.append(Finding(RETAINED, kept, partition, first, detail))
        if before[partition] and log_starts[partition] < before[partition][0][0]:
            # Below the tier's start lies only what remote retention expired: the brokers must not keep
            # (nor the gateway serve) it once the reconciler has trimmed.
            detail = (
                f"brokers' log start {log_starts[partition]}, the tier starts at {before[partition][0][0]}"
            )
            findings.append(Finding(RETAINED, kept, partition, log_starts[partition], detail))
        # Below the tier's window only what the brokers still hold must be readable.
        retained_from[(kept, partition)] = min(window_from, log_starts[partition])
        tier_from[(kept, partition)] = window_from
    for topic, read_committed in ((plain, True), (txn, True), (txn, False), (kept, True)):
        try:
            read = system.read_through_gateway(
                topic, read_committed=read_committed, from_earliest=topic == kept
            )
        except AssertionError as error:  # an error the client saw is a finding, and the campaign goes on
            findings.append(Finding(UNREADABLE, topic, -1, -1, str(error)[:2000]))
            continue
        result.records_checked += len(read)
        findings += check(
            system.ledger, read, read_committed=read_committed, topics=[topic], retained_from=retained_from
        )
    # The tier alone (``tierkeeper read``): everything acknowledged up to its last record is there, and of
    # a recreated topic only the live incarnation's records.
    for topic in (plain, txn, kept):
        live_id = system.topic_id(topic) if topic in system.deleted else None
        starts = dict.fromkeys(range(PARTITIONS), 0)
        if topic == kept:  # retention deletes: from where the tier begins, if it holds anything
            starts = {partition: rows[0][0] for partition, rows in after.items() if rows}
        with concurrent.futures.ThreadPoolExecutor(max_workers=PARTITIONS) as pool:
            reads = {
                partition: pool.submit(system.read_tier, topic, partition, live_id, from_offset=start)
                for partition, start in starts.items()
            }
        for partition, read in reads.items():
            tiered = read.result()
            result.records_checked += len(tiered)
            end = max((r.offset for r in tiered), default=-1)
            upto = Ledger(aborted=system.ledger.aborted, deleted_values=system.ledger.deleted_values)
            upto.acked[(topic, partition)] = {
                o: v for o, v in system.ledger.acked[(topic, partition)].items() if o <= end
            }
            findings += check(upto, tiered, read_committed=True, topics=[topic], retained_from=tier_from)
        if system.spark is not None:
            # The Spark source, a third reader of the tier alone, held to the same end as the CLI's read.
            through_spark = system.read_spark(topic, live_id, read_committed=True)
            result.records_checked += len(through_spark)
            upto = Ledger(aborted=system.ledger.aborted, deleted_values=system.ledger.deleted_values)
            ends = {
                p: max((r.offset for r in through_spark if r.partition == p), default=-1)
                for p in range(PARTITIONS)
            }
            for partition in range(PARTITIONS):
                upto.acked[(topic, partition)] = {
                    o: v for o, v in system.ledger.acked[(topic, partition)].items() if o <= ends[partition]
                }
            findings += check(
                upto, through_spark, read_committed=True, topics=[topic], retained_from=tier_from
            )
    findings += check_deleted_incarnations(system, result)
    findings += check_deleted_tier(system, result)
    return findings


def check_deleted_tier(system: CampaignSystem, result: RoundResult) -> list[Finding]:
    """A TieredTopic with ``deletionPolicy: Delete`` deleted: no object of its topic left in the bucket
    (listed by s3fs, not by the storage core's catalog, so an object nothing references counts too), and
    what the brokers still hold readable through the gateway (the topic stays in Kafka)."""
    topic = result.deleting
    if topic is None:
        return []
    findings = [Finding(TIER_NOT_DELETED, topic, -1, -1, key) for key in system.bucket_objects(topic)]
    starts = system.log_start_offsets(topic)
    try:
        read = system.read_through_gateway(topic, read_committed=True, from_earliest=True)
    except AssertionError as error:
        return findings + [Finding(UNREADABLE, topic, -1, -1, str(error)[:2000])]
    result.records_checked += len(read)
    held = {(topic, p): start for p, start in starts.items()}
    return findings + check(system.ledger, read, read_committed=True, topics=[topic], retained_from=held)


def check_deleted_incarnations(system: CampaignSystem, result: RoundResult) -> list[Finding]:
    """A deleted incarnation's tier is what the delete path says for a TieredTopic that stays (the
    default ``deletionPolicy: Retain``, and remote retention infinite): kept whole, readable by its topic
    id, every record it held at the delete still there, nothing of the new incarnation in it."""
    findings: list[Finding] = []
    for topic in result.topics:
        for old_id, tiered_at_delete in system.deleted.get(topic, []):
            for partition in range(PARTITIONS):
                held = tiered_at_delete.get(partition, -1)
                if held < 0:
                    continue  # nothing of it was tiered before the delete (a reconcile killed early)
                tiered = system.read_tier(topic, partition, old_id)
                result.records_checked += len(tiered)
                end = max((r.offset for r in tiered), default=-1)
                if end < held:
                    findings.append(
                        Finding(LOST, topic, partition, end + 1, f"incarnation {old_id} held up to {held}")
                    )
                old = Ledger(aborted=system.ledger.aborted)
                acked = system.ledger.deleted[(topic, old_id)].get(partition, {})
                old.acked[(topic, partition)] = {o: v for o, v in acked.items() if o <= end}
                findings += check(old, tiered, read_committed=True, topics=[topic])
                live = {v for p in range(PARTITIONS) for v in system.ledger.acked[(topic, p)].values()}
                findings += [
                    Finding(OLD_INCARNATION, topic, partition, r.offset, f"the live record in {old_id}")
                    for r in tiered
                    if r.value in live
                ]
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
    extra_rate: float = EXTRA_RATE,
    operator_rate: float = OPERATOR_RATE,
) -> list[RoundResult]:
    results = []
    operator_kinds = OPERATOR_KINDS if isinstance(system, OperatorSystem) else ()
    for round_no in range(first_round, first_round + rounds):
        plan = plan_round(
            seed,
            round_no,
            steps=steps,
            brokers=tuple(system.cluster.node_ids),
            faults=faults,
            extra_rate=extra_rate,
            operator_kinds=operator_kinds,
            operator_rate=operator_rate,
        )
        started = time.monotonic()
        result = run_round(system, plan)
        row = result.report()
        row["seconds"] = round(time.monotonic() - started, 1)
        if not result.ok:
            # Shown before the replays, which take a round each.
            print(f"round failed, shrinking: {json.dumps(row)[:6000]}", file=sys.stderr, flush=True)
            fails = _replayer(system, plan)
            shortest = shrink(plan.faults, fails, budget=shrink_budget)
            row["shortest_history"] = RoundPlan(seed, round_no, steps, shortest).history()
        out(row)
        results.append(result)
        if retire:
            system.retire(*result.topics, *([result.deleting] if result.deleting else []))
    return results


def main(argv: list[str] | None = None) -> int:
    from harness.moto_s3 import MotoServer

    parser = argparse.ArgumentParser(prog="make campaign", description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--first-round", type=int, default=0, help="replay a seed's rounds from this one")
    parser.add_argument("--steps", type=int, default=3, help="produce + reconcile steps per round")
    parser.add_argument("--faults", type=int, default=3, help="faults drawn per round")
    parser.add_argument(
        "--extra-rate",
        type=float,
        default=EXTRA_RATE,
        help="chance per round of each extra kind (topic recreated, broker wiped and rebuilt, clock jump)",
    )
    parser.add_argument(
        "--operator",
        action="store_true",
        help="reconcile through the operator installed from the Helm chart on the harness control plane "
        "(a TieredCluster, Jobs run by the process kubelet; the reconciler kill becomes a Job's pod deleted "
        "mid-run) instead of tierkeeper standalone",
    )
    parser.add_argument(
        "--operator-rate",
        type=float,
        default=OPERATOR_RATE,
        help="with --operator: chance per round of each operator kind (the operator's replicas killed, a "
        "deletionPolicy Delete TieredTopic deleted)",
    )
    parser.add_argument(
        "--spark", action="store_true", help="read the tier through the Spark source too (a local session)"
    )
    parser.add_argument("--workdir", type=Path, default=Path("campaign-run"))
    parser.add_argument("--report", type=Path, help="append one JSON line per round here")
    args = parser.parse_args(argv)
    # Absolute: the brokers and the gateway run in other working directories than this process.
    args.workdir = args.workdir.resolve()
    moto = MotoServer(args.workdir / "moto").start()
    plane = None
    if args.operator:
        from harness.control_plane import ControlPlane

        plane = ControlPlane(args.workdir / "k8s").start()
        system: CampaignSystem = OperatorSystem.start_with_operator(args.workdir / "system", moto, plane)
    else:
        system = CampaignSystem.start(args.workdir / "system", moto)
    if args.spark:
        from harness.spark import local_session

        system.spark = local_session(args.workdir / "spark")

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
            extra_rate=args.extra_rate,
            operator_rate=args.operator_rate,
            out=out,
        )
    finally:
        if system.spark is not None:
            system.spark.stop()
        system.stop()
        if plane is not None:
            plane.stop()
        moto.stop()
    failed = [r for r in results if not r.ok]
    checked = sum(r.records_checked for r in results)
    pods = (
        f", {system.pods_deleted} Job pods deleted mid-run, the operator killed {system.operator_kills} times"
        if isinstance(system, OperatorSystem)
        else ""
    )
    print(
        f"campaign seed {args.seed}: {len(results)} rounds, {checked} records checked, {len(failed)} failed"
        + pods
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
