"""The in-process executor of a reconcile round (standalone mode): each planned action becomes the same
request the operator's Job would get (:mod:`storage_core.reconcile.requests`) and runs here, through the
same ``jobs`` function the Job's command calls, its outcome returned to be folded in at once
(:mod:`storage_core.reconcile.round`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.resources import TieredBrokerSpec
from storage_core.errors import TierkeeperError
from storage_core.reconcile.planner import CleanupAction, CopyAction
from storage_core.reconcile.requests import (
    Request,
    cleanup_request,
    copy_request,
    table_request,
)
from storage_core.reconcile.round import CleanupOutcome, CopyOutcome, TableOutcome
from storage_core.reconcile.tables import TableAction

StoreFactory = Callable[[KafkaClusterConfig], Any]


class InProcessExecutor:
    def __init__(
        self,
        clusters: Mapping[str, KafkaClusterConfig],
        brokers: Callable[[str], TieredBrokerSpec | None],
        admins: Any,
        store_factory: StoreFactory,
        kafka_config_dirs: Mapping[str, Path],
    ) -> None:
        """``brokers``: a TieredBroker's spec by key; ``admins``: the round's Kafka clients per cluster
        (``ClusterClients``: its client and the properties it was made with)."""
        self._clusters = clusters
        self._brokers = brokers
        self._admins = admins
        self._store_factory = store_factory
        self._dirs = kafka_config_dirs
        self.requests: list[Request] = []
        """Every request run, in order (what a round ran, side by side with the operator's Jobs)."""

    def _config_dir(self, cluster: str) -> str | None:
        directory = self._dirs.get(cluster)
        return str(directory) if directory is not None else None

    def copy(self, action: CopyAction) -> CopyOutcome:
        from storage_core.jobs.copy import copy_options, run_copy

        cluster = self._clusters[action.cluster]
        broker = self._brokers(action.broker_key)
        assert broker is not None  # the planner only copies from usable brokers
        request = copy_request(action, cluster, broker, config_dir=self._config_dir(action.cluster))
        self.requests.append(request)
        try:
            report = run_copy(
                copy_options(request, self._admins.config(action.cluster)),
                self._store_factory(cluster),
                admin_factory=lambda _servers, _config: self._admins(action.cluster),
            )
        except TierkeeperError as exc:
            return CopyOutcome(failure=str(exc))
        return CopyOutcome(rows=report.rows())

    def cleanup(self, action: CleanupAction) -> CleanupOutcome:
        from storage_core.jobs.cleanup import cleanup_options, run_cleanup, run_cleanup_on_spark

        cluster = self._clusters[action.cluster]
        request = cleanup_request(action, cluster, config_dir=self._config_dir(action.cluster))
        self.requests.append(request)
        options = cleanup_options(request, self._admins.config(action.cluster))
        try:
            store = self._store_factory(cluster)
            if request.engine == "spark":
                report = run_cleanup_on_spark(store, options, request.spark.master, dict(request.spark.conf))
            else:
                report = run_cleanup(store, options)
        except TierkeeperError as exc:
            return CleanupOutcome(failure=str(exc))
        return CleanupOutcome(report=report)

    def table(self, action: TableAction) -> TableOutcome:
        from storage_core.jobs.table_runs import run_table_request

        request = table_request(action, self._clusters[action.cluster])
        self.requests.append(request)
        try:
            report = run_table_request(request, dict(request.remote.storage_options))
        except TierkeeperError as exc:
            return TableOutcome(failure=str(exc))
        return TableOutcome(report=report)


def remote_store(cluster: KafkaClusterConfig) -> Any:
    """The cluster's remote tier, as a Job opens it (fsynced on file://)."""
    from storage_core.adapters.store import RemoteStore

    return RemoteStore(cluster.remote.url, dict(cluster.remote.storage_options))
