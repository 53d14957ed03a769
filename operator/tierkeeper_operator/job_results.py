"""The topic rounds' Jobs at the start of a round: running ones become :class:`RunningWork` (what they
hold), and in a full round every finished one not yet recorded is folded into the statuses of the
resources it worked for (its row's ``fold`` in :data:`.job_kinds.KINDS`), counted, announced by an Event
and then marked recorded (an annotation, written after the fold: a restarted operator neither loses nor
double-counts a result, since the status is written by the same round before the next one lists the Job).

Jobs of the other kinds (delete, rebuild, bucket check) are their followers', and a kind this operator
does not know (a newer version's) is left alone.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

from storage_core.api.status import TieredTopicStatus
from storage_core.reconcile.observed import RunningWork
from tierkeeper_operator.job_kinds import KINDS, Finished, JobKind, KindRules, kind_of
from tierkeeper_operator.jobs import (
    ANNOTATION_RECORDED,
    LABEL_BROKER,
    LABEL_CLUSTER,
    job_state,
    termination_message,
    work_of,
)
from tierkeeper_operator.kube import Kube
from tierkeeper_operator.listing import Listed
from tierkeeper_operator.metrics import Metrics
from tierkeeper_operator.writes import EventSink, post_events


class JobResults:
    def __init__(
        self, kube: Kube, metrics: Metrics, clock: Callable[[], datetime.datetime], event: EventSink
    ) -> None:
        self._kube = kube
        self._metrics = metrics
        self._clock = clock
        self._event = event

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
            state = job_state(job)
            if state == "Running":
                if rules.holds == "broker":
                    held["broker"].add((labels.get(LABEL_CLUSTER, ""), int(labels.get(LABEL_BROKER, -1))))
                elif rules.holds is not None:
                    held[rules.holds].update(key for key, _, _ in work_of(job))
            elif full and (meta.get("annotations") or {}).get(ANNOTATION_RECORDED) != "true":
                broker_key = broker_keys.get(
                    (labels.get(LABEL_CLUSTER, ""), int(labels.get(LABEL_BROKER, -1)))
                )
                self._record(job, kind, state, broker_key, listed)
                recorded.append(meta["name"])
        running = RunningWork(frozenset(held["broker"]), frozenset(held["cleanup"]), frozenset(held["table"]))
        return running, recorded

    def _record(
        self, job: Mapping[str, Any], kind: JobKind, state: str, broker_key: str | None, listed: Listed
    ) -> None:
        rules, meta = KINDS[kind], job["metadata"]
        name = meta["name"]
        message = termination_message(self._kube.job_pods(meta["namespace"], name))
        work = work_of(job)
        done = Finished(name, state, message or "", [(k, t) for k, t, _ in work], broker_key, self._clock())
        further = rules.fold(done, listed.statuses) if rules.fold is not None else []
        self._metrics.jobs.labels(kind=kind.value, result=state).inc()
        for key, _, _ in work:
            obj, status = listed.topic_objs.get(key), listed.statuses.topics.get(key)
            outcome = _last_run(rules, status)
            if obj is not None and outcome is not None:
                failed = outcome.result == "Failed"
                self._event(
                    obj,
                    "TieredTopic",
                    "Warning" if failed else "Normal",
                    f"{rules.event}{outcome.result}",
                    f"Job {name}: {outcome.message}",
                )
        post_events(self._event, listed, further)
        self._kube.annotate_job(meta["namespace"], name, {ANNOTATION_RECORDED: "true"})


def _last_run(rules: KindRules, status: TieredTopicStatus | None) -> Any:
    if status is None or rules.last_run is None:
        return None
    return rules.last_run(status)
