"""``tierkeeper fetchers plan|apply``: size num.replica.fetchers from the real assignment, then set it.

``plan`` reads the assignment from a live cluster or an assignment file and prints, for the current
and the recommended fetcher count, how follower partitions fall onto fetcher threads. ``apply`` moves
the cluster default (or one broker's override) to a target in steps Kafka accepts, verifying each.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from storage_core.cli.common import add_result_file_arg, emit_json, require_positive, write_result_file
from storage_core.cli.kafka_client import add_kafka_client_args, kafka_client_config
from storage_core.cli.subcommand import Subcommand
from storage_core.errors import ConfigError

if TYPE_CHECKING:
    from storage_core.fetchers.planner import Recommendation

DEFAULT_MIN = 1
DEFAULT_MAX = 16
# Kafka's own default for num.replica.fetchers, assumed for assignment files without --fetchers.
KAFKA_DEFAULT_FETCHERS = 1


def add_args(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="fetchers_command", metavar="{plan,apply}", required=True)

    plan = verbs.add_parser("plan", help="report thread loads for the current and the recommended count")
    source = plan.add_mutually_exclusive_group(required=True)
    source.add_argument("--bootstrap-servers", metavar="B", help="read the assignment from this cluster")
    source.add_argument(
        "--assignment", metavar="FILE", type=Path, help="read the assignment from a JSON file"
    )
    plan.add_argument(
        "--fetchers",
        metavar="N",
        type=int,
        help=f"current count to compare against (default: what the brokers run, or {KAFKA_DEFAULT_FETCHERS} "
        "for a file)",
    )
    _bounds(plan)
    plan.add_argument("--json", action="store_true", help="print the figures as JSON")
    plan.add_argument("--timeout", type=float, default=30.0, help="seconds per Admin call (default 30)")
    add_kafka_client_args(plan)
    plan.set_defaults(handler=plan_command)

    apply = verbs.add_parser("apply", help="set num.replica.fetchers step by step and verify each step")
    apply.add_argument("--bootstrap-servers", metavar="B", required=True)
    apply.add_argument("--target", metavar="N", type=int, help="count to reach (default: the recommendation)")
    apply.add_argument(
        "--broker", metavar="ID", type=int, help="set this broker's override instead of the cluster default"
    )
    _bounds(apply)
    apply.add_argument(
        "--timeout", type=float, default=30.0, help="seconds per Admin call and per step check"
    )
    apply.add_argument("--json", action="store_true", help="print the steps taken as JSON")
    add_result_file_arg(apply)
    add_kafka_client_args(apply)
    apply.set_defaults(handler=apply_command)


def _bounds(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--min",
        dest="minimum",
        metavar="N",
        type=int,
        default=DEFAULT_MIN,
        help=f"smallest count to consider (default {DEFAULT_MIN})",
    )
    parser.add_argument(
        "--max",
        dest="maximum",
        metavar="N",
        type=int,
        default=DEFAULT_MAX,
        help=f"largest count to consider (default {DEFAULT_MAX})",
    )


def _check_bounds(args: argparse.Namespace) -> None:
    counts = (name for name in ("fetchers", "target", "minimum", "maximum") if name in args)
    require_positive(args, *counts, flags={"minimum": "--min", "maximum": "--max"})
    if args.minimum > args.maximum:
        raise ConfigError(f"--min {args.minimum} is above --max {args.maximum}")


def _running_count(values: list[int]) -> tuple[int, str | None]:
    """The count most brokers run, plus a note when they disagree."""
    counts = Counter(values)
    value = min(counts, key=lambda v: (-counts[v], v))
    note = (
        None
        if len(counts) == 1
        else f"brokers run different counts {dict(sorted(counts.items()))}; comparing against {value}"
    )
    return value, note


def plan_command(args: argparse.Namespace) -> int:
    from storage_core.fetchers.assignment_file import load_assignment
    from storage_core.fetchers.planner import recommend, recommendation_dict

    _check_bounds(args)
    note = None
    if args.assignment is not None:
        assignment = load_assignment(args.assignment)
        current = args.fetchers or KAFKA_DEFAULT_FETCHERS
    else:
        from storage_core.adapters.kafka_fetchers import FetcherAdmin

        admin = FetcherAdmin(args.bootstrap_servers, timeout=args.timeout, config=kafka_client_config(args))
        assignment = admin.assignment()
        if args.fetchers is not None:
            current = args.fetchers
        else:
            current, note = _running_count([s.value for s in admin.settings(assignment.brokers).values()])
    rec = recommend(assignment, current, args.minimum, args.maximum)
    if args.json:
        data = recommendation_dict(rec)
        data["weighted"] = assignment.weighted
        data["note"] = note
        print(json.dumps(data, indent=2))
        return 0
    _print_plan(rec, assignment.weighted, note)
    return 0


def _print_plan(rec: Recommendation, weighted: bool, note: str | None) -> None:
    from storage_core.fetchers.planner import CountReport, format_load

    unit = "bytes/s" if weighted else "partitions"

    def headline(label: str, r: CountReport) -> str:
        where = f" (broker {r.worst_broker})" if r.worst_broker is not None else ""
        return (
            f"{label} {r.fetchers}: busiest thread {format_load(r.worst_load)} {unit}{where}, "
            f"{r.perfect_groups}/{r.groups} leader groups spread perfectly, {r.threads_used} threads used"
        )

    if note:
        print(f"note: {note}")
    print(headline("current", rec.current))
    print(headline("recommended", rec.recommended) + f" (searched {rec.minimum}..{rec.maximum})")
    steps = " -> ".join(str(v) for v in (rec.current.fetchers, *rec.steps))
    print(f"steps: {steps}" if rec.steps else "steps: none, already there")
    print()
    print(
        f"| broker | threads used | idle threads | max load | mean load |  (current {rec.current.fetchers} "
        f"-> recommended {rec.recommended.fetchers})"
    )
    print("|---|---|---|---|---|")
    for after in rec.recommended.brokers:
        before = rec.current.broker(after.broker)
        print(
            f"| {after.broker} | {before.threads_used} -> {after.threads_used} | {before.idle_threads} -> "
            f"{after.idle_threads} "
            f"| {format_load(before.max_load)} -> {format_load(after.max_load)} "
            f"| {before.mean_load:.3g} -> {after.mean_load:.3g} |"
        )
    print()
    for line in rec.explanations:
        print(line)


def apply_command(args: argparse.Namespace) -> int:
    from storage_core.adapters.kafka_fetchers import CONFIG_NAME, FetcherAdmin, StepResult, common_value
    from storage_core.fetchers.planner import recommend, step_plan

    _check_bounds(args)
    admin = FetcherAdmin(args.bootstrap_servers, timeout=args.timeout, config=kafka_client_config(args))
    brokers = admin.brokers()
    if args.broker is not None and args.broker not in brokers:
        raise ConfigError(f"broker {args.broker} is not in the cluster (brokers: {brokers})")
    scope = [args.broker] if args.broker is not None else brokers
    current = common_value(admin.settings(scope), per_broker=args.broker is not None)
    target = args.target
    if target is None:
        target = recommend(admin.assignment(), current, args.minimum, args.maximum).recommended.fetchers
    steps = step_plan(current, target)
    where = f"broker {args.broker} override" if args.broker is not None else "cluster default"

    def say(line: str) -> None:
        if not args.json:  # --json: the summary alone on stdout
            print(line)

    if not steps:
        say(f"{CONFIG_NAME} is already {current} ({where}); nothing to do")
    else:
        say(
            f"{CONFIG_NAME} {current} -> {target} ({where}) in {len(steps)} step(s): "
            + " -> ".join(map(str, (current, *steps)))
        )

    def report(step: StepResult) -> None:
        say(
            f"set {step.value}: brokers {', '.join(map(str, step.brokers))} report {step.value} after "
            f"{step.seconds:.1f}s"
        )

    taken = admin.apply(steps, broker=args.broker, on_step=report) if steps else []
    result = {"from": current, "target": target, "steps": [step.value for step in taken]}
    if args.result_file:
        write_result_file(args.result_file, json.dumps(result, separators=(",", ":")))
    if args.json:
        emit_json(result)
    return 0


COMMAND = Subcommand(
    "fetchers",
    help="plan and apply num.replica.fetchers from the real replica assignment",
    description="Model how followers spread partitions over replica fetcher threads and pick a count.",
    add_args=add_args,
    run=None,
)
