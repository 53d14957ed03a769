"""The composition root: every collaborator of the rounds is built here, once, from the settings tree
(:mod:`.settings`), and handed to the parts that use it; nothing below builds another.

:func:`build_reconciler` wires one :class:`~tierkeeper_operator.loop.Reconciler` over a Kubernetes
adapter (the tests call it with their own); :func:`start_rounds` adds what a running operator has
around it (the API client, the metrics and readiness endpoints, peering, the watches, the rounds thread).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from storage_core.adapters.kafka_client_config import ClusterClients, kafka_admin, parse_config_dirs
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.reconcile.round import KafkaObserver
from tierkeeper_operator.background import Rounds
from tierkeeper_operator.cluster_rounds import ClusterRounds
from tierkeeper_operator.deletion import Deletion
from tierkeeper_operator.fetcher_rounds import FetcherRounds
from tierkeeper_operator.job_results import JobResults
from tierkeeper_operator.job_starter import JobStarter
from tierkeeper_operator.kube import Kube
from tierkeeper_operator.live_clusters import LiveClusters
from tierkeeper_operator.loop import Reconciler
from tierkeeper_operator.metrics import Metrics
from tierkeeper_operator.peering import PeeringGate
from tierkeeper_operator.probes import ReadyState, serve_readiness
from tierkeeper_operator.rebuild_rounds import RebuildRounds
from tierkeeper_operator.settings import OperatorSettings
from tierkeeper_operator.wakeups import SpecWatch, Wakeups
from tierkeeper_operator.writes import Events, JobCreator, RoundTools

log = logging.getLogger("tierkeeper.operator")


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def kafka_config_dirs(
    settings: OperatorSettings, clusters: Mapping[str, KafkaClusterConfig]
) -> dict[str, Path]:
    """``--kafka-config-dir`` flags against the file clusters: where each one's client Secret is mounted."""
    return parse_config_dirs(list(settings.clusters.kafka_config_dirs), clusters)


def build_reconciler(
    kube: Kube,
    clusters: Mapping[str, KafkaClusterConfig],
    settings: OperatorSettings | None = None,
    *,
    admin_factory: Callable[[str, dict[str, str]], Any] | None = None,
    clock: Callable[[], datetime.datetime] = _utc_now,
) -> Reconciler:
    """The rounds of an operator over ``kube``, with the file ``clusters`` in effect beside the
    TieredClusters listed. ``admin_factory``: how a Kafka client is made (the real Admin by default)."""
    settings = settings or OperatorSettings()
    live = LiveClusters(clusters)
    metrics = Metrics(topic_labels=settings.metrics.topic_labels)
    event = Events(kube)
    create_job = JobCreator(kube, metrics, settings.peering.identity)
    tools = RoundTools(kube, live, clock, event, create_job)
    cluster_rounds = ClusterRounds(kube, clusters, live, clock, event, create_job, settings.gateway)
    # A file entry's clientConfigSecretRef Secret is mounted in this pod (read as files); a
    # TieredCluster's is read by name, with `get` on exactly the Secrets granted (cluster_rounds).
    dirs = kafka_config_dirs(settings, clusters)
    kafka = ClusterClients(live, dirs, admin_factory or kafka_admin, cluster_rounds.secret_for)
    return Reconciler(
        kube=kube,
        clusters=live,
        metrics=metrics,
        clock=clock,
        event=event,
        kafka=kafka,
        observer=KafkaObserver(kafka, clock),
        cluster_rounds=cluster_rounds,
        deletion=Deletion(tools),
        results=JobResults(tools, metrics),
        starter=JobStarter(tools),
        fetchers=FetcherRounds(
            kube, live, clock, metrics, kafka_config_dirs=dirs, secret_reader=cluster_rounds.secret_for
        ),
        rebuilds=RebuildRounds(kube, live, event),
    )


def start_rounds(clusters: Mapping[str, KafkaClusterConfig], settings: OperatorSettings) -> Rounds:
    """The running operator's rounds thread (started), with its endpoints, peering gate and watches."""
    import kubernetes

    try:
        kubernetes.config.load_incluster_config()
        api_client = kubernetes.client.ApiClient()
    except kubernetes.config.ConfigException:
        api_client = kubernetes.config.new_client_from_config()
    kube = Kube(api_client, settings.scope.namespaces)
    reconciler = build_reconciler(kube, clusters, settings)
    if settings.metrics.port is not None:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics.port, registry=reconciler.metrics.registry)
    gate = None
    if not settings.peering.standalone:
        gate = PeeringGate(kube, settings.peering, clusterwide=not settings.scope.namespaces)
        try:
            gate.ensure()
        except Exception as exc:  # noqa: BLE001 - the gate retries every interval; not fatal at startup
            log.warning("could not create the peering objects yet: %s", exc)
    ready = ReadyState()
    if settings.probes.readiness:
        serve_readiness(settings.probes.readiness, ready)
    wakeups = Wakeups()
    SpecWatch(kube, wakeups).start()
    SpecWatch(kube, wakeups, "tieredclusters", full_rounds=True).start()
    return Rounds(reconciler, settings.rounds.interval, gate, ready, wakeups=wakeups).start()
