"""Reconcile rounds on a thread beside kopf: one round every interval until stopped.

A failed round (API server or Kafka unreachable) is logged and counted, and the next round tries again;
it never stops the operator.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from storage_core.api.cluster import KafkaClusterConfig
from tierkeeper_operator.loop import Reconciler
from tierkeeper_operator.metrics import Metrics

log = logging.getLogger("tierkeeper.operator")


class Rounds:
    def __init__(self, reconciler: Reconciler, interval: float) -> None:
        self.reconciler = reconciler
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tierkeeper-rounds", daemon=True)

    def start(self) -> Rounds:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                result = self.reconciler.run_round()
                if result.created or result.recorded:
                    log.info("round: created %s, recorded %s", result.created, result.recorded)
            except Exception as exc:  # noqa: BLE001 - any failure of a round is retried by the next one
                self.reconciler.metrics.errors.labels(kind=type(exc).__name__).inc()
                log.warning("reconcile round failed: %s", exc)
            self._stop.wait(self.interval)


def start_rounds(
    clusters: Mapping[str, KafkaClusterConfig],
    interval: float,
    namespaces: tuple[str, ...],
    metrics_port: int | None,
) -> Rounds:
    import kubernetes

    from tierkeeper_operator.kube import Kube

    try:
        kubernetes.config.load_incluster_config()
        api_client = kubernetes.client.ApiClient()
    except kubernetes.config.ConfigException:
        api_client = kubernetes.config.new_client_from_config()
    metrics = Metrics()
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, registry=metrics.registry)
    return Rounds(Reconciler(Kube(api_client, namespaces), clusters, metrics=metrics), interval).start()
