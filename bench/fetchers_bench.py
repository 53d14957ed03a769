"""Fetcher planner benchmark: the LINE topology, 100 random assignments, and planning time at scale, for
the planner library and for the operator's decision path.

    PYTHONPATH=. .venv/bin/python bench/fetchers_bench.py [--seed 405] [--runs 100]

Prints markdown tables; exits 1 if the recommendation is ever worse than the current count, if
planning 50 brokers x 20,000 partitions takes 5 s or more, or if the operator's round computing every
broker's proposal for that cluster takes 2 s or more.
"""

from __future__ import annotations

import argparse
import datetime
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.resources import ReplicaFetchers
from storage_core.fetchers.model import Assignment
from storage_core.fetchers.placement import random_placement, round_robin_placement
from storage_core.fetchers.planner import CountReport, recommend
from storage_core.jobs.fetcher_changes import BrokerFetchers, FetcherChanges

PLAN_BUDGET_SECONDS = 5.0
OPERATOR_BUDGET_SECONDS = 2.0
# The cluster the operator round's step requests would name (no step is taken: nothing is approved).
CLUSTERS = {
    "big": KafkaClusterConfig.model_validate(
        {"name": "big", "bootstrapServers": "big:9092", "remote": {"url": "memory://big"}}
    )
}


def line_topology() -> Assignment:
    brokers = list(range(25))
    return Assignment(
        brokers=tuple(brokers), topics={"line-traffic": round_robin_placement(brokers, 40, 3, 0, 0)}
    )


def random_assignment(rng: random.Random) -> Assignment:
    """10-50 brokers, 10-2,000 partitions over 1-10 topics, RF 2-3, placed round robin as the old admin tool
    did (random start index and shift per topic)."""
    brokers = list(range(1, rng.randint(10, 50) + 1))
    total = rng.randint(10, 2000)
    topic_count = rng.randint(1, min(10, total))
    cuts = sorted(rng.sample(range(1, total), topic_count - 1))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, total])]
    topics = {}
    for i, size in enumerate(sizes):
        rf = rng.randint(2, 3)
        topics[f"topic-{i}-{rng.randrange(10**6)}"] = round_robin_placement(
            brokers, size, rf, rng.randrange(len(brokers)), rng.randrange(len(brokers))
        )
    return Assignment(brokers=tuple(brokers), topics=topics)


def _row(label: str, r: CountReport) -> str:
    idle = sum(b.idle_threads for b in r.brokers)
    imperfect = r.groups - r.perfect_groups
    return (
        f"| {label} | {r.fetchers} | {r.worst_load:g} | {r.perfect_groups}/{r.groups} "
        f"({100 * r.perfect_groups / r.groups:.1f}%) | {imperfect} | {r.threads_used} | {idle} |"
    )


def bench_line() -> None:
    rec = recommend(line_topology(), current=5, minimum=1, maximum=16)
    print("### LINE topology: 25 brokers, 40 partitions, RF 3, round robin (start 0, shift 0)\n")
    print(
        "| count | fetchers | busiest thread | perfectly spread groups | groups not spread perfectly "
        "| threads used | idle slots |"
    )
    print("|---|---|---|---|---|---|---|")
    print(_row("Kafka's 5 (LINE)", rec.current))
    print(_row("recommended", rec.recommended))
    print(f"\nsteps: {' -> '.join(map(str, (5, *rec.steps)))}\n")


def bench_random(seed: int, runs: int) -> bool:
    rng = random.Random(seed)
    groups = perfect_now = perfect_rec = worse = better = 0
    worst_now: list[float] = []
    worst_rec: list[float] = []
    share_now: list[float] = []
    share_rec: list[float] = []
    for _ in range(runs):
        assignment = random_assignment(rng)
        current = rng.randint(2, 8)
        rec = recommend(assignment, current, 1, 16)
        now, best = rec.current, rec.recommended
        groups += now.groups
        perfect_now += now.perfect_groups
        perfect_rec += best.perfect_groups
        worse += best.worst_load > now.worst_load
        better += best.worst_load < now.worst_load
        worst_now.append(now.worst_load)
        worst_rec.append(best.worst_load)
        share_now.append(now.perfect_groups / now.groups)
        share_rec.append(best.perfect_groups / best.groups)
    print(
        f"### {runs} random assignments (seed {seed}; 10-50 brokers, 10-2,000 partitions, RF 2-3; "
        "current count drawn from 2-8; search 1-16)\n"
    )
    print("| | current count | recommended count |")
    print("|---|---|---|")
    print(
        f"| perfectly spread groups, all assignments | {100 * perfect_now / groups:.1f}% "
        f"| {100 * perfect_rec / groups:.1f}% |"
    )
    print(
        f"| perfectly spread groups, mean per assignment | {100 * statistics.mean(share_now):.1f}% "
        f"| {100 * statistics.mean(share_rec):.1f}% |"
    )
    print(
        f"| worst thread load, mean | {statistics.mean(worst_now):.2f} | {statistics.mean(worst_rec):.2f} |"
    )
    print(
        f"| worst thread load, median | {statistics.median(worst_now):g} | {statistics.median(worst_rec):g} |"
    )
    print(f"| worst thread load, max | {max(worst_now):g} | {max(worst_rec):g} |")
    print(f"\nrecommended worse than current: {worse}/{runs}; strictly better: {better}/{runs}\n")
    return worse == 0


def bench_scale(seed: int) -> bool:
    rng = random.Random(seed)
    brokers = list(range(1, 51))
    topics = {f"big-{i}": random_placement(brokers, 1000, 3, rng) for i in range(20)}
    assignment = Assignment(brokers=tuple(brokers), topics=topics)
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        rec = recommend(assignment, current=4, minimum=1, maximum=16)
        timings.append(time.perf_counter() - start)
    best = min(timings)
    print("### Planning time: 50 brokers x 20,000 partitions (RF 3, 40,000 follower replicas), counts 1-16\n")
    print("| runs | best | median | budget | recommended |")
    print("|---|---|---|---|---|")
    print(
        f"| {len(timings)} | {best:.2f} s | {statistics.median(timings):.2f} s | {PLAN_BUDGET_SECONDS:g} s "
        f"| {rec.recommended.fetchers} "
        f"(worst {rec.recommended.worst_load:g} vs {rec.current.worst_load:g} at 4) |"
    )
    print()
    return math.isfinite(best) and statistics.median(timings) < PLAN_BUDGET_SECONDS


@dataclass(frozen=True)
class _Setting:
    value: int


class _ObservedCluster:
    """What the operator's round reads from Kafka (metadata and DescribeConfigs), answered from memory so
    the figure is the decision path alone: the Admin round trips depend on the cluster, not on us."""

    def __init__(self, assignment: Assignment, current: int) -> None:
        self._assignment = assignment
        self._current = current

    def assignment(self) -> Assignment:
        return self._assignment

    def settings(self, brokers: list[int]) -> dict[int, _Setting]:
        return {b: _Setting(self._current) for b in brokers}


def bench_operator(seed: int) -> bool:
    """The operator's fetcher round (FetcherChanges.run, as FetcherRounds calls it): group the assignment
    once, then decide each of the 50 TieredBrokers' proposals from no previous status."""
    rng = random.Random(seed)
    brokers = list(range(1, 51))
    topics = {f"big-{i}": random_placement(brokers, 1000, 3, rng) for i in range(20)}
    observed = _ObservedCluster(Assignment(brokers=tuple(brokers), topics=topics), current=4)
    now = datetime.datetime(2026, 11, 23, tzinfo=datetime.UTC)
    print(
        "### Operator round: every TieredBroker's proposal, 50 brokers x 20,000 partitions (RF 3), "
        "Kafka reads answered from memory\n"
    )
    print("| spec bounds | runs | best | median | budget | brokers with a proposal |")
    print("|---|---|---|---|---|---|")
    ok = True
    for bounds in ({"min": 1, "max": 8}, {"min": 1, "max": 16}):
        spec = ReplicaFetchers.model_validate({"mode": "auto", **bounds})
        items = [BrokerFetchers(f"kafka/broker-{b}", "big", b, spec, None) for b in brokers]
        timings = []
        for _ in range(3):
            changes = FetcherChanges(
                lambda _name: observed, lambda: now, clusters=CLUSTERS, steps_per_round=1
            )
            start = time.perf_counter()
            outcomes = changes.run(items)
            timings.append(time.perf_counter() - start)
        proposing = sum(1 for o in outcomes.values() if o.status is not None and o.status.phase != "Balanced")
        median = statistics.median(timings)
        ok = ok and median < OPERATOR_BUDGET_SECONDS
        print(
            f"| {bounds['min']}-{bounds['max']} | {len(timings)} | {min(timings):.2f} s | {median:.2f} s "
            f"| {OPERATOR_BUDGET_SECONDS:g} s | {proposing}/50 |"
        )
    print()
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=405)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    bench_line()
    ok_random = bench_random(args.seed, args.runs)
    ok_scale = bench_scale(args.seed)
    ok_operator = bench_operator(args.seed)
    if not ok_random:
        print("FAIL: a recommendation was worse than the current count", file=sys.stderr)
    if not ok_scale:
        print(f"FAIL: planning took {PLAN_BUDGET_SECONDS:g} s or more", file=sys.stderr)
    if not ok_operator:
        print(
            f"FAIL: the operator's proposal round took {OPERATOR_BUDGET_SECONDS:g} s or more", file=sys.stderr
        )
    return 0 if ok_random and ok_scale and ok_operator else 1


if __name__ == "__main__":
    sys.exit(main())
