"""The operator's part of a round for replica fetchers: read each TieredBroker's annotation, decide
(:mod:`storage_core.reconcile.fetchers`), take at most one step per broker
(:mod:`storage_core.jobs.fetcher_changes`), and fold the result into the status the round writes.

Called from :meth:`tierkeeper_operator.loop.Reconciler.run_round` after the shared planner, so the
broker's kstatus conditions and ``status.fetchers`` are written in the same single patch. An annotation
that was acted on is removed (a merge patch setting it to null), as Strimzi does with KafkaRebalance.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from storage_core.adapters.kafka_client_config import ClusterClients
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import Parsed
from storage_core.api.resources import TieredBrokerSpec
from storage_core.api.status import FetcherStatus
from storage_core.jobs.fetcher_changes import (
    BrokerFetchers,
    FetcherChanges,
    fetcher_admin,
)
from storage_core.reconcile.conditions import recorded_conditions
from storage_core.reconcile.fetchers import ANNOTATION, broker_conditions, health_of, parse_command
from storage_core.reconcile.planner import Event, Plan
from storage_core.reconcile.request_ids import acted_on, pending_fetchers
from tierkeeper_operator.kube import Kube, KubeError, log_ref
from tierkeeper_operator.metrics import Metrics

log = logging.getLogger("tierkeeper.operator")


def _previous(obj: Mapping[str, Any]) -> FetcherStatus | None:
    raw = (obj.get("status") or {}).get("fetchers")
    if not raw:
        return None
    try:
        return FetcherStatus.model_validate(raw)
    except ValueError:
        return None  # a status another writer broke is planned afresh


class FetcherRounds:
    def __init__(
        self,
        kube: Kube,
        clusters: Mapping[str, KafkaClusterConfig],
        clock: Callable[[], datetime.datetime],
        metrics: Metrics,
        *,
        admin_factory: Callable[[str, dict[str, str]], Any] | None = None,
        kafka_config_dirs: Mapping[str, Path] | None = None,
        secret_reader: Callable[[str], dict[str, str] | None] | None = None,
    ) -> None:
        self.kube = kube
        self.clusters = clusters
        self.clock = clock
        self.metrics = metrics
        self._config_dirs = dict(kafka_config_dirs or {})
        self._admin_for = ClusterClients(
            clusters, self._config_dirs, admin_factory or fetcher_admin, secret_reader
        )

    def run(
        self,
        broker_objs: Mapping[str, Mapping[str, Any]],
        broker_specs: Mapping[str, Parsed[TieredBrokerSpec]],
        planned: Plan,
    ) -> None:
        """Decide and step every managed broker; update ``planned`` (statuses, events) in place."""
        self._admin_for.refresh()
        items = []
        from_spec: dict[str, str] = {}  # broker -> id of the spec request this round's command comes from
        for key, obj in broker_objs.items():
            spec = broker_specs[key].value
            status = planned.broker_status.get(key)
            if status is None or spec is None or spec.cluster_ref.name not in self.clusters:
                continue
            previous = _previous(obj)
            if spec.replica_fetchers is None and previous is None:
                continue
            command, problem = parse_command(obj["metadata"].get("annotations"))
            if problem is not None:
                planned.events.append(Event(key, "Warning", "FetcherCommandInvalid", problem))
                self._clear_annotation(obj)
            request = pending_fetchers(spec, status)
            if command is None and problem is None and request is not None:
                command = request.command  # GitOps: acted on once per id, recorded below
                from_spec[key] = request.id
            items.append(
                BrokerFetchers(
                    key=key,
                    cluster=spec.cluster_ref.name,
                    broker_id=spec.broker_id,
                    spec=spec.replica_fetchers,
                    previous=previous,
                    command=command,
                    paused=spec.paused,
                )
            )
        if not items:
            return
        changes = FetcherChanges(
            self._admin_for,
            self.clock,
            clusters=self.clusters,
            config_dirs=self._config_dirs,
            steps_per_round=1,
        )
        outcomes = changes.run(items)
        now = self.clock()
        for item in items:
            outcome = outcomes[item.key]
            obj = broker_objs[item.key]
            base = planned.broker_status[item.key]
            health = health_of(base)
            generation = obj["metadata"].get("generation")
            conditions = broker_conditions(
                health, outcome.status, generation, recorded_conditions(obj.get("status")), now
            )
            ready = next(c for c in conditions if c.type == "Ready")
            planned.broker_status[item.key] = base.model_copy(
                update={"fetchers": outcome.status, "conditions": conditions, "message": ready.message}
            )
            for event in outcome.events:
                planned.events.append(Event(item.key, event.type, event.reason, event.message))
            if outcome.consumed and item.key in from_spec:
                planned.broker_status[item.key] = acted_on(
                    planned.broker_status[item.key], fetchers=from_spec[item.key]
                )
            elif outcome.consumed:
                self._clear_annotation(obj)
            if outcome.status is None and item.previous is not None:
                self._drop_status(obj)
            labels = {"cluster": item.cluster, "broker": str(item.broker_id)}
            if outcome.status is not None and outcome.status.imbalance is not None:
                self.metrics.fetcher_imbalance.labels(**labels).set(outcome.status.imbalance)
            if outcome.status is not None and outcome.status.before is not None:
                self.metrics.fetcher_idle_threads.labels(**labels).set(outcome.status.before.idle_threads)
            self.metrics.fetcher_proposal_pending_seconds.labels(**labels).set(
                _pending_seconds(outcome.status, now)
            )
            self.metrics.fetcher_steps.inc(len(outcome.steps))

    def _clear_annotation(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        try:
            self.kube.remove_annotation("tieredbrokers", obj, ANNOTATION)
        except KubeError as exc:
            log.warning(
                "could not remove %s from %s/%s: %s",
                ANNOTATION,
                meta["namespace"],
                meta["name"],
                exc,
                extra=log_ref(obj),
            )

    def _drop_status(self, obj: Mapping[str, Any]) -> None:
        """spec.replicaFetchers was removed: status.fetchers is this round's to clear (the main round
        carries it over as it finds it)."""
        meta = obj["metadata"]
        try:
            self.kube.patch_status("tieredbrokers", meta["namespace"], meta["name"], {"fetchers": None})
        except KubeError as exc:
            log.warning(
                "could not clear status.fetchers of %s/%s: %s",
                meta["namespace"],
                meta["name"],
                exc,
                extra=log_ref(obj),
            )


def _pending_seconds(status: FetcherStatus | None, now: datetime.datetime) -> float:
    """How long a proposal has waited for approval: what the chart's TierkeeperFetcherProposalPending alert
    watches. Zero while nothing waits (balanced, applying, stopped, failed)."""
    if status is None or status.phase != "ProposalReady" or not status.planned_at:
        return 0.0
    planned = datetime.datetime.fromisoformat(status.planned_at.replace("Z", "+00:00"))
    return max(0.0, (now - planned).total_seconds())
