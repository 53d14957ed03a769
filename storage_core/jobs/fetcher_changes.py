"""Carry out the fetcher decisions of :mod:`storage_core.reconcile.fetchers` against Kafka.

Per round: the assignment is read once per cluster (metadata), each managed broker's count once
(DescribeConfigs), then each broker's decision is made and its step set as the broker's own dynamic
override (IncrementalAlterConfigs), and DescribeConfigs is polled until the broker reports it, within
``spec.replicaFetchers.stepTimeoutSeconds``. Each step is a
:class:`~storage_core.reconcile.requests.FetcherStepRequest`, built where every other request of a round
is and carried out by :func:`run_fetcher_step`, the function ``tierkeeper fetchers apply`` (the request's
command line) ends in too. The operator takes one step per broker per round, so a
``stop`` annotation lands between steps; standalone mode runs each change to its end in one round.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.resources import ReplicaFetchers
from storage_core.api.status import FetcherStatus
from storage_core.errors import TierkeeperError
from storage_core.reconcile.fetchers import (
    APPROVE_BY_ANNOTATION,
    ClusterFetchers,
    Command,
    FetcherEvent,
    FetcherObservation,
    after_step,
    cluster_fetchers,
    decide,
    shared_brokers,
    step_failed,
)
from storage_core.reconcile.requests import FetcherStepRequest, fetcher_step_request


@dataclass(frozen=True)
class BrokerFetchers:
    """One TieredBroker's fetcher inputs."""

    key: str
    cluster: str
    broker_id: int
    spec: ReplicaFetchers | None
    previous: FetcherStatus | None
    command: Command | None = None
    paused: bool = False


@dataclass
class FetcherOutcome:
    status: FetcherStatus | None
    consumed: bool = False
    events: list[FetcherEvent] = field(default_factory=list)
    steps: list[FetcherStepRequest] = field(default_factory=list)


def run_fetcher_step(request: FetcherStepRequest, admin: Any) -> None:
    """Set the step as the broker's own override and wait until the broker reports it in effect.
    ``admin``: a :class:`storage_core.adapters.kafka_fetchers.FetcherAdmin` made for ``request.kafka``."""
    admin.set_broker_override(request.broker_id, request.value)
    admin.wait_for(request.value, [request.broker_id], timeout=request.timeout_seconds)


class FetcherChanges:
    """``admin_for(cluster)`` returns a :class:`storage_core.adapters.kafka_fetchers.FetcherAdmin`
    (or anything with ``assignment``, ``settings``, ``set_broker_override`` and ``wait_for``);
    ``clusters`` and ``config_dirs`` (where each cluster's ``clientConfigSecretRef`` is mounted) make
    the step requests."""

    def __init__(
        self,
        admin_for: Callable[[str], Any],
        clock: Callable[[], datetime.datetime],
        *,
        clusters: Mapping[str, KafkaClusterConfig],
        config_dirs: Mapping[str, Path] | None = None,
        steps_per_round: int | None = 1,
        approve: bool = False,
        how_to_approve: str = APPROVE_BY_ANNOTATION,
    ) -> None:
        self._admin_for = admin_for
        self._clock = clock
        self._clusters = clusters
        self._dirs = dict(config_dirs or {})
        self.steps_per_round = steps_per_round
        self.approve = approve
        self.how_to_approve = how_to_approve

    def _cluster(self, cluster: str, seen: dict[str, ClusterFetchers | str]) -> ClusterFetchers | str:
        if cluster not in seen:
            try:
                seen[cluster] = cluster_fetchers(self._admin_for(cluster).assignment())
            except TierkeeperError as exc:
                seen[cluster] = str(exc)
        return seen[cluster]

    def run(self, brokers: Sequence[BrokerFetchers]) -> dict[str, FetcherOutcome]:
        seen: dict[str, ClusterFetchers | str] = {}
        out: dict[str, FetcherOutcome] = {}
        shared = shared_brokers([(i.key, i.cluster, i.broker_id) for i in brokers if i.spec is not None])
        for item in brokers:
            if item.key in shared and item.spec is not None:
                held = item.previous or FetcherStatus(phase="Pending", mode=item.spec.mode)
                out[item.key] = FetcherOutcome(held.model_copy(update={"message": shared[item.key]}))
                continue
            if item.spec is None or item.paused:
                # Paused: take no action, keep the annotation for later; unmanaged: drop the status.
                status = item.previous if item.spec is not None else None
                out[item.key] = FetcherOutcome(
                    status, consumed=item.spec is None and item.command is not None
                )
                continue
            out[item.key] = self._one(item, item.spec, self._cluster(item.cluster, seen))
        return out

    def _observe(self, item: BrokerFetchers, view: ClusterFetchers | str) -> FetcherObservation:
        if isinstance(view, str):
            return FetcherObservation(error=view)
        if item.broker_id not in view.brokers:
            return FetcherObservation(
                error=f"broker {item.broker_id} is not in the cluster's metadata "
                f"(brokers {list(view.brokers)})"
            )
        try:
            setting = self._admin_for(item.cluster).settings([item.broker_id])[item.broker_id]
        except TierkeeperError as exc:
            return FetcherObservation(error=str(exc))
        return FetcherObservation(cluster=view, current=setting.value)

    def _one(
        self, item: BrokerFetchers, spec: ReplicaFetchers, view: ClusterFetchers | str
    ) -> FetcherOutcome:
        observed = self._observe(item, view)
        outcome = FetcherOutcome(item.previous)
        previous, command = item.previous, item.command
        while True:
            decision = decide(
                spec,
                item.broker_id,
                observed,
                previous,
                command,
                self._clock(),
                approve=self.approve,
                how_to_approve=self.how_to_approve,
            )
            outcome.status = decision.status
            outcome.consumed = outcome.consumed or decision.consumed
            outcome.events.extend(decision.events)
            command = None
            value = decision.set_value
            limit_reached = self.steps_per_round is not None and len(outcome.steps) >= self.steps_per_round
            if value is None or decision.status is None or limit_reached:
                return outcome
            directory = self._dirs.get(item.cluster)
            request = fetcher_step_request(
                self._clusters[item.cluster],
                item.broker_id,
                value,
                spec,
                config_dir=str(directory) if directory is not None else None,
            )
            try:
                run_fetcher_step(request, self._admin_for(item.cluster))
            except TierkeeperError as exc:
                failed = step_failed(decision.status, value, str(exc), self._clock())
                outcome.status = failed
                outcome.events.append(FetcherEvent("Warning", "FetcherChangeFailed", failed.message))
                return outcome
            outcome.steps.append(request)
            previous = after_step(decision.status, value, self._clock())
            observed = replace(observed, current=value)


def fetcher_admin(bootstrap_servers: str, config: dict[str, str]) -> Any:
    """The default client factory of :class:`storage_core.adapters.kafka_client_config.ClusterClients`
    for fetcher changes."""
    from storage_core.adapters.kafka_fetchers import FetcherAdmin

    return FetcherAdmin(bootstrap_servers, config=config)
