"""Evaluate candidate num.replica.fetchers values and recommend one, with a plan Kafka will accept.

For a candidate count F the planner looks at every follower broker's fetch groups (the partitions it
copies from one leader) and reports how F splits them into threads. A group of n partitions is
*perfectly spread* when its busiest thread carries ceil(n / F) partitions: no thread could carry
fewer. The recommendation minimises the cluster-wide busiest thread; ties go to the count closest to
the current one (smallest change to a running cluster), then to a count coprime with the broker count
(round-robin placement and the fetcher hash then do not share a period), then to the smaller count.

Kafka rejects a dynamic thread-count update outside [old / 2, 2 * old] (integer division, and never
below 1; DynamicThreadPool.validateReconfiguration), so big moves are planned as several steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from storage_core.fetchers.model import Assignment, FetcherThread, FetchGroup, fetch_groups


@dataclass(frozen=True)
class GroupSpread:
    """How F splits one (follower, leader) group."""

    follower: int
    leader: int
    partitions: int
    busiest: int
    ideal: int
    max_load: float
    busiest_fetcher_id: int

    @property
    def perfect(self) -> bool:
        return self.busiest == self.ideal


@dataclass(frozen=True)
class BrokerReport:
    """One follower broker under a candidate count.

    ``idle_threads`` counts thread slots (F per leader the broker follows) that carry no partition:
    Kafka does not start them, but they are capacity the count was meant to add. ``mean_load`` is the
    broker's total load over those F-per-leader slots, i.e. what each thread would carry if spread
    perfectly; ``max_load`` over ``mean_load`` is the imbalance.
    """

    broker: int
    leaders: int
    partitions: int
    threads_used: int
    idle_threads: int
    max_load: float
    mean_load: float
    busiest_thread: FetcherThread | None
    groups: int
    perfect_groups: int
    groups_detail: tuple[GroupSpread, ...]


@dataclass(frozen=True)
class CountReport:
    """The whole cluster under a candidate count ``fetchers``."""

    fetchers: int
    brokers: tuple[BrokerReport, ...]
    worst_load: float
    worst_broker: int | None
    groups: int
    perfect_groups: int
    threads_used: int

    def broker(self, broker_id: int) -> BrokerReport:
        for report in self.brokers:
            if report.broker == broker_id:
                return report
        raise KeyError(broker_id)


def _spread(group: FetchGroup, fetchers: int) -> tuple[GroupSpread, int]:
    """The group's spread under ``fetchers`` and how many of its threads carry anything."""
    counts = group.counts(fetchers)
    if group.weights is None:
        busiest_id = max(range(fetchers), key=lambda i: (counts[i], -i))
        max_load = float(counts[busiest_id])
    else:
        loads = group.loads(fetchers)
        busiest_id = max(range(fetchers), key=lambda i: (loads[i], counts[i], -i))
        max_load = loads[busiest_id]
    spread = GroupSpread(
        follower=group.follower,
        leader=group.leader,
        partitions=group.size,
        busiest=max(counts),
        ideal=-(-group.size // fetchers),
        max_load=max_load,
        busiest_fetcher_id=busiest_id,
    )
    return spread, fetchers - counts.count(0)


def evaluate_groups(groups: Sequence[FetchGroup], brokers: Iterable[int], fetchers: int) -> CountReport:
    """Report ``fetchers`` over precomputed groups (reuse them when trying many counts)."""
    if fetchers < 1:
        raise ValueError(f"num.replica.fetchers must be at least 1, got {fetchers}")
    by_follower: dict[int, list[FetchGroup]] = {b: [] for b in brokers}
    for group in groups:
        by_follower.setdefault(group.follower, []).append(group)
    reports = []
    for broker in sorted(by_follower):
        pairs = [_spread(g, fetchers) for g in by_follower[broker]]
        spreads = [s for s, _ in pairs]
        used = sum(u for _, u in pairs)
        slots = fetchers * len(spreads)
        total = math.fsum(
            math.fsum(g.weights) if g.weights is not None else float(g.size) for g in by_follower[broker]
        )
        busiest = max(spreads, key=lambda s: (s.max_load, s.busiest, -s.leader), default=None)
        reports.append(
            BrokerReport(
                broker=broker,
                leaders=len(spreads),
                partitions=sum(s.partitions for s in spreads),
                threads_used=used,
                idle_threads=slots - used,
                max_load=busiest.max_load if busiest else 0.0,
                mean_load=total / slots if slots else 0.0,
                busiest_thread=FetcherThread(busiest.leader, busiest.busiest_fetcher_id) if busiest else None,
                groups=len(spreads),
                perfect_groups=sum(1 for s in spreads if s.perfect),
                groups_detail=tuple(spreads),
            )
        )
    worst = max(reports, key=lambda r: (r.max_load, -r.broker), default=None)
    return CountReport(
        fetchers=fetchers,
        brokers=tuple(reports),
        worst_load=worst.max_load if worst else 0.0,
        worst_broker=worst.broker if worst and worst.leaders else None,
        groups=sum(r.groups for r in reports),
        perfect_groups=sum(r.perfect_groups for r in reports),
        threads_used=sum(r.threads_used for r in reports),
    )


def evaluate(assignment: Assignment, fetchers: int) -> CountReport:
    """Report how ``fetchers`` threads per leader split the assignment's follower partitions."""
    return evaluate_groups(fetch_groups(assignment), assignment.brokers, fetchers)


def is_allowed_step(old: int, new: int) -> bool:
    """Whether a broker at ``old`` fetchers accepts a dynamic update to ``new``."""
    return new == old or (new >= 1 and new >= old // 2 and new <= old * 2)


def step_plan(current: int, target: int) -> tuple[int, ...]:
    """The fewest values to set, in order, to move from ``current`` to ``target`` (empty if equal).

    Each step goes as far as the rule allows (double, or halve rounding down), which is optimal
    because the reachable range only widens as the value grows.
    """
    if current < 1 or target < 1:
        raise ValueError(f"fetcher counts must be at least 1, got {current} -> {target}")
    steps = []
    value = current
    while value != target:
        value = min(target, value * 2) if target > value else max(target, value // 2)
        steps.append(value)
    return tuple(steps)


@dataclass(frozen=True)
class Recommendation:
    """The chosen count, the current one, every candidate, the steps and one line per broker."""

    current: CountReport
    recommended: CountReport
    candidates: tuple[CountReport, ...]
    minimum: int
    maximum: int
    steps: tuple[int, ...]
    explanations: tuple[str, ...]


def _rank(report: CountReport, current: int, broker_count: int) -> tuple[float, int, int, int]:
    coprime = math.gcd(report.fetchers, broker_count) == 1 if broker_count else True
    return (report.worst_load, abs(report.fetchers - current), 0 if coprime else 1, report.fetchers)


def recommend(assignment: Assignment, current: int, minimum: int = 1, maximum: int = 16) -> Recommendation:
    """Pick the count in [minimum, maximum] that minimises the worst thread load; explain per broker.

    ``current`` is always evaluated for comparison; when it lies within the bounds it is a candidate,
    so the recommendation is never worse than it.
    """
    if not 1 <= minimum <= maximum:
        raise ValueError(f"need 1 <= min <= max, got min={minimum} max={maximum}")
    if current < 1:
        raise ValueError(f"current fetcher count must be at least 1, got {current}")
    groups = fetch_groups(assignment)
    candidates = tuple(evaluate_groups(groups, assignment.brokers, f) for f in range(minimum, maximum + 1))
    best = min(candidates, key=lambda r: _rank(r, current, len(assignment.brokers)))
    now = next((c for c in candidates if c.fetchers == current), None)
    if now is None:
        now = evaluate_groups(groups, assignment.brokers, current)
    return Recommendation(
        current=now,
        recommended=best,
        candidates=candidates,
        minimum=minimum,
        maximum=maximum,
        steps=step_plan(current, best.fetchers),
        explanations=tuple(
            explain(now.broker(b.broker), b, now.fetchers, best.fetchers) for b in best.brokers
        ),
    )


@dataclass(frozen=True)
class BrokerRecommendation:
    """One broker's own count (num.replica.fetchers is a per-broker dynamic config): a follower's count
    splits only that follower's fetches, so each broker can be given the count that suits its groups."""

    broker: int
    current: BrokerReport
    recommended: BrokerReport
    steps: tuple[int, ...]
    explanation: str


def recommend_broker(
    groups: Sequence[FetchGroup],
    broker: int,
    broker_count: int,
    current: int,
    minimum: int = 1,
    maximum: int = 16,
) -> BrokerRecommendation:
    """The count in [minimum, maximum] that minimises ``broker``'s busiest fetcher thread.

    ``groups`` are the broker's own fetch groups (``follower == broker``; others are ignored). Ties go
    to the count closest to ``current``, then to one coprime with ``broker_count``, then to the smaller,
    as in :func:`recommend`; the current count is a candidate when it lies within the bounds.
    """
    if not 1 <= minimum <= maximum:
        raise ValueError(f"need 1 <= min <= max, got min={minimum} max={maximum}")
    if current < 1:
        raise ValueError(f"current fetcher count must be at least 1, got {current}")
    own = [g for g in groups if g.follower == broker]

    def report(fetchers: int) -> BrokerReport:
        return evaluate_groups(own, (broker,), fetchers).broker(broker)

    candidates = {f: report(f) for f in range(minimum, maximum + 1)}
    now = candidates.get(current) or report(current)
    best_count = min(
        candidates,
        key=lambda f: (
            candidates[f].max_load,
            abs(f - current),
            0 if not broker_count or math.gcd(f, broker_count) == 1 else 1,
            f,
        ),
    )
    best = candidates[best_count]
    explanation = explain(now, best, current, best_count)
    if best.max_load > now.max_load:
        # Only a current count outside the bounds can be better than the best within them.
        explanation = (
            f"broker {broker}: busiest thread {format_load(now.max_load)} -> {format_load(best.max_load)}; "
            f"the current {current} is outside {minimum}..{maximum}, and {best_count} is the best count "
            "within them"
        )
    return BrokerRecommendation(
        broker=broker,
        current=now,
        recommended=best,
        steps=step_plan(current, best_count),
        explanation=explanation,
    )


def format_load(value: float) -> str:
    """Loads are partition counts unless byte rates were given; print integers without a fraction."""
    return str(int(value)) if value == int(value) else f"{value:.6g}"


def explain(before: BrokerReport, after: BrokerReport, old: int, new: int) -> str:
    """One line saying what moving this broker from ``old`` to ``new`` fetchers changes, and why."""
    head = f"broker {after.broker}:"
    if after.leaders == 0:
        return f"{head} follows no partition, so the fetcher count does not matter here"
    spread = (
        f"{before.perfect_groups}/{before.groups} -> {after.perfect_groups}/{after.groups} "
        "leader groups spread perfectly"
    )
    if old == new:
        return (
            f"{head} keep {new}: busiest thread {format_load(after.max_load)}, "
            f"{after.perfect_groups}/{after.groups} leader groups spread perfectly, {after.idle_threads} "
            "idle slots"
        )
    change = f"busiest thread {format_load(before.max_load)} -> {format_load(after.max_load)}"
    worst = next(g for g in before.groups_detail if (g.leader, g.busiest_fetcher_id) == before.busiest_thread)
    if not worst.perfect:
        why = (
            f"with {old}, {worst.busiest} of the {worst.partitions} partitions from leader {worst.leader} "
            f"share fetcher {worst.busiest_fetcher_id} (ideal {worst.ideal})"
        )
    elif after.max_load < before.max_load:
        why = (
            f"{new} threads per leader split the {worst.partitions} partitions from leader {worst.leader} "
            "further"
        )
    elif after.max_load > before.max_load:
        why = "worse on this broker, but the cluster-wide busiest thread decides"
    else:
        why = "no change on this broker"
    return f"{head} {change}, {spread}; {why}"


def report_dict(report: CountReport) -> dict[str, Any]:
    """Plain-JSON figures of one count, per broker included (what the CLI and operator status show)."""
    return {
        "fetchers": report.fetchers,
        "worst_load": report.worst_load,
        "worst_broker": report.worst_broker,
        "groups": report.groups,
        "perfect_groups": report.perfect_groups,
        "threads_used": report.threads_used,
        "brokers": [
            {
                "broker": b.broker,
                "leaders": b.leaders,
                "partitions": b.partitions,
                "threads_used": b.threads_used,
                "idle_threads": b.idle_threads,
                "max_load": b.max_load,
                "mean_load": b.mean_load,
                "busiest_thread": list(b.busiest_thread) if b.busiest_thread else None,
                "groups": b.groups,
                "perfect_groups": b.perfect_groups,
            }
            for b in report.brokers
        ],
    }


def recommendation_dict(rec: Recommendation) -> dict[str, Any]:
    return {
        "bounds": {"min": rec.minimum, "max": rec.maximum},
        "current": report_dict(rec.current),
        "recommendation": {
            **report_dict(rec.recommended),
            "steps": list(rec.steps),
            "explanations": list(rec.explanations),
        },
        "candidates": [
            {
                "fetchers": c.fetchers,
                "worst_load": c.worst_load,
                "perfect_groups": c.perfect_groups,
                "groups": c.groups,
                "threads_used": c.threads_used,
            }
            for c in rec.candidates
        ],
    }
