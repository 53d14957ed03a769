"""The topic rounds' Jobs at the start of a round: running ones become :class:`RunningWork` (what they
hold), and in a full round every finished one not yet recorded is folded into the statuses of the
resources it worked for (its row's ``fold`` in :data:`.job_kinds.KINDS`), counted, announced by an Event
and marked recorded (an annotation), so a restarted operator does not fold it again. The statuses are
written at the end of the same round: a result is folded at most once.

Jobs of the other kinds (delete, rebuild, bucket check) are their followers', and a kind this operator
does not know (a newer version's) is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from storage_core.api.status import TieredTopicStatus
from storage_core.reconcile.observed import RunningWork
from tierkeeper_operator.job_folds import Finished
from tierkeeper_operator.job_kinds import KINDS, JobKind, KindRules, kind_of
from tierkeeper_operator.jobs import (
    ANNOTATION_RECORDED,
    LABEL_BROKER,
    LABEL_CLUSTER,
    job_state,
    termination_message,
    work_of,
)
from tierkeeper_operator.listing import Listed
from tierkeeper_operator.metrics import Metrics
from tierkeeper_operator.writes import RoundTools, post_events


class JobResults:
    def __init__(self, tools: RoundTools, metrics: Metrics) -> None:
        self._tools = tools
        self._metrics = metrics

    def take(self, listed: Listed, full: bool) -> tuple[RunningWork, list[str]]:
        """What the running Jobs hold, and (full rounds only: a quick round may not hold the topics a
        result concerns) the names of the finished Jobs folded in now."""
        broker_keys = {
            (p.value.cluster_ref.name, p.value.broker_id): k
            for k, p in listed.broker_specs.items()
            if p.value is not None
        }
        recorded = []
        held: dict[str, set[Any]] = {"broker": set(), "cleanup": set(), "table": set()}
        for job in listed.jobs:
            kind = kind_of(job)
            if kind is None or KINDS[kind].followed_by != "topics":
                continue
            rules = KINDS[kind]
            meta = job["metadata"]
            labels = meta.get("labels") or {}
            if job_state(job) == "Running":
                if rules.holds == "broker":
                    held["broker"].add((labels.get(LABEL_CLUSTER, ""), int(labels.get(LABEL_BROKER, -1))))
                elif rules.holds is not None:
                    held[rules.holds].update(key for key, _, _ in work_of(job))
            elif full and (meta.get("annotations") or {}).get(ANNOTATION_RECORDED) != "true":
                broker_key = broker_keys.get(
                    (labels.get(LABEL_CLUSTER, ""), int(labels.get(LABEL_BROKER, -1)))
                )
                self._record(job, kind, broker_key, listed)
                recorded.append(meta["name"])
        running = RunningWork(frozenset(held["broker"]), frozenset(held["cleanup"]), frozenset(held["table"]))
        return running, recorded

    def _record(self, job: Mapping[str, Any], kind: JobKind, broker_key: str | None, listed: Listed) -> None:
        rules, meta = KINDS[kind], job["metadata"]
        message = termination_message(self._tools.kube.job_pods(meta["namespace"], meta["name"]))
        done = Finished(job, message or "", broker_key, self._tools.clock())
        further = rules.fold(done, listed.statuses) if rules.fold is not None else []
        self._metrics.jobs.labels(kind=kind.value, result=done.state).inc()
        for key, _ in done.work:
            obj, status = listed.topic_objs.get(key), listed.statuses.topics.get(key)
            outcome = _last_run(rules, status)
            if obj is not None and outcome is not None:
                failed = outcome.result == "Failed"
                self._tools.event(
                    obj,
                    "TieredTopic",
                    "Warning" if failed else "Normal",
                    f"{kind.event}{outcome.result}",
                    f"Job {done.name}: {outcome.message}",
                )
        post_events(self._tools.event, listed, further)
        self._tools.kube.annotate_job(meta["namespace"], done.name, {ANNOTATION_RECORDED: "true"})


def _last_run(rules: KindRules, status: TieredTopicStatus | None) -> Any:
    if status is None or rules.last_run is None:
        return None
    return rules.last_run(status)
