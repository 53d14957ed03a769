"""How every part of a round writes to the API server besides statuses: Events, the Jobs it creates, and
writes a few at a time. Built once (:mod:`.compose`) and shared by the parts, so a Job is stamped and
counted the same way whichever part creates it."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.reconcile.planner import Event
from tierkeeper_operator.jobs import ANNOTATION_CREATED_BY, LABEL_KIND
from tierkeeper_operator.kube import Kube, KubeError
from tierkeeper_operator.listing import Listed
from tierkeeper_operator.metrics import Metrics

log = logging.getLogger("tierkeeper.operator")
COMPONENT = "tierkeeper-operator"
PATCH_WORKERS = 8  # concurrent writes; the API server is shared, so a few, not hundreds

EventSink = Callable[[Mapping[str, Any], str, str, str, str], None]
"""(object, kind, type, reason, message): posts an Event."""


def key_of(obj: Mapping[str, Any]) -> str:
    """``namespace/name``: how a round keys the objects it listed."""
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


class Events:
    """Posts Events as the operator's component; a failed post is logged, never fails the round."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube

    def __call__(self, obj: Mapping[str, Any], kind: str, type_: str, reason: str, message: str) -> None:
        try:
            self._kube.event(obj, kind, type_, reason, message, COMPONENT)
        except KubeError as exc:
            log.warning("could not post event %s on %s: %s", reason, key_of(obj), exc)


def post_events(sink: EventSink, listed: Listed, events: Iterable[Event]) -> None:
    """Post planned Events on the TieredTopic or TieredBroker their keys name (gone ones: dropped)."""
    for event in events:
        involved = listed.topic_objs.get(event.key) or listed.broker_objs.get(event.key)
        if involved is not None:
            kind = "TieredTopic" if event.key in listed.topic_objs else "TieredBroker"
            sink(involved, kind, event.type, event.reason, event.message)


class JobCreator:
    """Creates the topic rounds', deletions' and TieredClusters' Jobs stamped with this replica's id."""

    def __init__(self, kube: Kube, metrics: Metrics, identity: str) -> None:
        self._kube = kube
        self._metrics = metrics
        self._identity = identity
        """This replica's peer id, written on the Jobs it creates (empty: not written)."""

    def __call__(self, job: dict[str, Any]) -> bool:
        """Create ``job``; False when it exists already (created before a restart)."""
        if self._identity:
            job["metadata"].setdefault("annotations", {})[ANNOTATION_CREATED_BY] = self._identity
        created: bool = self._kube.create_job(job)
        if created:
            self._metrics.jobs_started.labels(kind=job["metadata"]["labels"][LABEL_KIND]).inc()
        return created


def parallel(action: Callable[[Any], Any], items: list[Any]) -> None:
    """Run ``action`` on every item, a few at a time: after 10,000 TieredTopics are created, the first
    round has 10,000 finalizers and statuses to write, and one at a time each waits a full API round
    trip. The first failure fails the round, as a sequential loop would."""
    if len(items) <= 1:
        for item in items:
            action(item)
        return
    with ThreadPoolExecutor(max_workers=PATCH_WORKERS, thread_name_prefix="tierkeeper-write") as pool:
        for future in [pool.submit(action, item) for item in items]:
            future.result()


@dataclass(frozen=True)
class RoundTools:
    """What the parts of a round act through, built once (:mod:`.compose`) and shared: the API server,
    the clusters in effect, the clock, Events and Job creation (stamped and counted the same way
    whichever part creates a Job)."""

    kube: Kube
    clusters: Mapping[str, KafkaClusterConfig]
    clock: Callable[[], datetime.datetime]
    event: EventSink
    create_job: Callable[[dict[str, Any]], bool]
