"""Reconcile rounds on a thread beside kopf: one round every interval until stopped.

A failed round (API server or Kafka unreachable) is logged and counted, and the next round tries again;
it never stops the operator. With peering (:mod:`tierkeeper_operator.peering`) a round runs only while
this replica is the active one; a standby replica checks every interval and runs nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from storage_core.api.cluster import KafkaClusterConfig
from tierkeeper_operator.loop import Reconciler
from tierkeeper_operator.metrics import Metrics
from tierkeeper_operator.peering import PeeringConfig, PeeringGate
from tierkeeper_operator.probes import ReadyState, serve_readiness

log = logging.getLogger("tierkeeper.operator")


class Rounds:
    def __init__(
        self,
        reconciler: Reconciler,
        interval: float,
        gate: PeeringGate | None = None,
        ready: ReadyState | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.interval = interval
        self.gate = gate
        self.ready = ready or ReadyState()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tierkeeper-rounds", daemon=True)
        self._role = ""

    def start(self) -> Rounds:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _may_run(self) -> bool:
        if self.gate is None:
            return True
        active = self.gate.active()
        self.reconciler.metrics.active.set(1 if active else 0)
        role = "active" if active else self.gate.reason
        if role != self._role:  # log the transitions, not every check
            log.info("peering: %s", role)
            self._role = role
        if not active:
            self.ready.standby(self.gate.reason)
        return active

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._may_run():
                    result = self.reconciler.run_round()
                    self.ready.round_ran()
                    if result.created or result.recorded:
                        log.info("round: created %s, recorded %s", result.created, result.recorded)
            except Exception as exc:  # noqa: BLE001 - any failure of a round is retried by the next one
                self.reconciler.metrics.errors.labels(kind=type(exc).__name__).inc()
                self.ready.failed(f"{type(exc).__name__}: {exc}"[:300])
                log.warning("reconcile round failed: %s", exc)
            self._stop.wait(self.interval)


@dataclass(frozen=True)
class RoundsOptions:
    """What the rounds thread needs from the command line."""

    interval: float
    namespaces: tuple[str, ...] = ()
    metrics_port: int | None = None
    readiness_endpoint: str | None = None
    peering: PeeringConfig | None = None
    """None: no peering (one replica)."""
    identity: str = ""
    """This replica's id (the peer id with peering), written on the Jobs it creates."""
    topic_labels: bool = False
    """Per-topic labels on the tiered-bytes and lag metrics (opt-in: one series per topic)."""
    kafka_config_dirs: Mapping[str, Path] = field(default_factory=dict)
    """Cluster name -> where its clientConfigSecretRef Secret is mounted (the operator's own clients)."""


def start_rounds(clusters: Mapping[str, KafkaClusterConfig], options: RoundsOptions) -> Rounds:
    import kubernetes

    from tierkeeper_operator.kube import Kube

    try:
        kubernetes.config.load_incluster_config()
        api_client = kubernetes.client.ApiClient()
    except kubernetes.config.ConfigException:
        api_client = kubernetes.config.new_client_from_config()
    metrics = Metrics(topic_labels=options.topic_labels)
    if options.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(options.metrics_port, registry=metrics.registry)
    kube = Kube(api_client, options.namespaces)
    gate = None
    if options.peering is not None:
        gate = PeeringGate(kube, options.peering, clusterwide=not options.namespaces)
        try:
            gate.ensure()
        except Exception as exc:  # noqa: BLE001 - the gate retries every interval; not fatal at startup
            log.warning("could not create the peering objects yet: %s", exc)
    ready = ReadyState()
    if options.readiness_endpoint:
        serve_readiness(options.readiness_endpoint, ready)
    reconciler = Reconciler(
        kube,
        clusters,
        metrics=metrics,
        identity=options.identity,
        kafka_config_dirs=options.kafka_config_dirs,
    )
    return Rounds(reconciler, options.interval, gate, ready).start()
