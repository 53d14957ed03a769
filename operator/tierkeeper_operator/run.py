"""Run the operator in this process: the entry point behind ``tierkeeper operator`` and
``python -m tierkeeper_operator``.

Replicas elect the active one through kopf peering (:mod:`tierkeeper_operator.peering`): kopf pauses the
handlers of a standby and the reconcile rounds follow the same rule. ``--no-peering`` (or kopf's name for
it, ``--standalone``, which is not ``tierkeeper standalone``: that runs the rounds without Kubernetes) runs
without peering (exactly one replica must run then).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storage_core.errors import ConfigError
from tierkeeper_operator.peering import (
    DEFAULT_LIFETIME,
    DEFAULT_PEERING_NAME,
    PeeringConfig,
    default_priority,
    own_identity,
)

if TYPE_CHECKING:
    from tierkeeper_operator.gateway_objects import GatewaySettings

LOG_REFKEY = "object"
"""Key of the resource reference (apiVersion, kind, namespace, name, uid) in JSON log lines."""


@dataclass(frozen=True)
class OperatorOptions:
    """What the command line says about where and how to run."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch (the command line requires these or all_namespaces)."""
    all_namespaces: bool = False
    """Watch every namespace (needs the ClusterRole of the chart)."""
    liveness_endpoint: str | None = None
    """e.g. http://0.0.0.0:8080/healthz; None disables the probe endpoint."""
    verbose: bool = False
    """Log at DEBUG level."""
    log_format: str = "text"
    """``text`` (kopf's usual lines) or ``json``: one JSON object per line, with ``object`` holding the
    resource's apiVersion, kind, namespace and name on lines about one resource."""
    cluster_files: tuple[Path, ...] = ()
    """Cluster configuration files (the chart mounts its ConfigMap of values ``clusters:``)."""
    kafka_config_dirs: tuple[str, ...] = ()
    """``CLUSTER=DIR``: where a cluster's clientConfigSecretRef Secret is mounted in this pod."""
    reconcile_interval: float = 30.0
    """Seconds between full reconcile rounds (Kafka observed, Jobs run, status written), or less when a
    topic's copy or cleanup falls due sooner; new or edited TieredTopics are judged sooner still, by quick
    rounds (:mod:`tierkeeper_operator.wakeups`)."""
    metrics_port: int | None = None
    """Serve Prometheus /metrics on this port; None: no metrics endpoint."""
    metrics_topic_labels: bool = False
    """Per-TieredTopic gauges (one series per topic; off by default)."""
    readiness_endpoint: str | None = None
    """e.g. http://0.0.0.0:8081/readyz; None disables the readiness endpoint."""
    no_peering: bool = False
    """No peering (kopf's ``standalone``): this must be the only replica."""
    peering_name: str = DEFAULT_PEERING_NAME
    """Name of the KopfPeering (per watched namespace) or ClusterKopfPeering (all namespaces)."""
    priority: int | None = None
    """Peering priority; None: minus the start time in microseconds (the oldest replica is active)."""
    peering_lifetime: int = DEFAULT_LIFETIME
    """Seconds a replica's keep-alive counts; a killed active replica is replaced after at most this."""
    gateway_service_monitors: bool = False
    """Keep a ServiceMonitor for each TieredCluster's gateway (the chart: metrics.serviceMonitor.enabled)."""
    gateway_service_monitor_labels: tuple[str, ...] = ()
    """``KEY=VALUE`` labels of those ServiceMonitors (what the Prometheus' serviceMonitorSelector matches)."""
    gateway_scrape_interval: str = "30s"
    """Their scrape interval."""

    def gateway_settings(self) -> GatewaySettings:
        """What every TieredCluster's gateway gets from the operator's own configuration."""
        from tierkeeper_operator.gateway_objects import GatewaySettings

        labels = {}
        for item in self.gateway_service_monitor_labels:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ConfigError(f"--gateway-service-monitor-label {item!r}: expected KEY=VALUE")
            labels[key] = value
        return GatewaySettings(
            service_monitor=self.gateway_service_monitors,
            service_monitor_labels=labels,
            scrape_interval=self.gateway_scrape_interval,
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        dest="namespaces",
        default=[],
        help="watch this namespace (repeatable)",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch all namespaces")
    parser.add_argument(
        "--liveness",
        dest="liveness_endpoint",
        default=None,
        help="serve a liveness probe, e.g. http://0.0.0.0:8080/healthz",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text, or json: one object per line, with the resource's namespace and name under 'object'",
    )
    parser.add_argument(
        "--cluster",
        action="append",
        type=Path,
        default=[],
        dest="cluster_files",
        metavar="CLUSTER.yaml",
        help="cluster configuration file that clusterRef names resolve against (repeatable)",
    )
    parser.add_argument(
        "--kafka-config-dir",
        action="append",
        default=[],
        dest="kafka_config_dirs",
        metavar="CLUSTER=DIR",
        help="where the clientConfigSecretRef Secret of CLUSTER is mounted (one file per client property): "
        "the operator's own Kafka clients read it there (repeatable; the chart sets one per cluster)",
    )
    parser.add_argument(
        "--reconcile-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds between full reconcile rounds (default 30; a round comes sooner when a topic's copy "
        "or cleanup falls due before then); each topic's copy and cleanup intervals decide what runs, and "
        "a new or edited TieredTopic is judged at once by a quick round",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port"
    )
    parser.add_argument(
        "--metrics-topic-labels",
        action="store_true",
        help="also export per-TieredTopic gauges (one series per topic; off by default)",
    )
    parser.add_argument(
        "--readiness",
        dest="readiness_endpoint",
        default=None,
        help="serve a readiness probe, e.g. http://0.0.0.0:8081/readyz (ready once connected and "
        "either a round ran or this replica is a standby)",
    )
    parser.add_argument(
        "--no-peering",
        "--standalone",
        dest="no_peering",
        action="store_true",
        help="run without kopf peering (only one replica may run); --standalone is kopf's name for it, "
        "unrelated to `tierkeeper standalone`",
    )
    parser.add_argument(
        "--peering",
        dest="peering_name",
        default=DEFAULT_PEERING_NAME,
        help=f"name of the KopfPeering/ClusterKopfPeering object (default {DEFAULT_PEERING_NAME})",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority; default: the oldest replica is active (minus its start time in "
        "microseconds), any N >= 0 outranks the default",
    )
    parser.add_argument(
        "--peering-lifetime",
        type=int,
        default=DEFAULT_LIFETIME,
        metavar="SECONDS",
        help=f"seconds a replica's keep-alive counts (default {DEFAULT_LIFETIME}); a standby takes over "
        "at most this long after the active replica died",
    )
    parser.add_argument(
        "--gateway-service-monitors",
        action="store_true",
        help="keep a prometheus-operator ServiceMonitor for each TieredCluster's gateway (needs its CRD)",
    )
    parser.add_argument(
        "--gateway-service-monitor-label",
        action="append",
        default=[],
        dest="gateway_service_monitor_labels",
        metavar="KEY=VALUE",
        help="a label of those ServiceMonitors (repeatable)",
    )
    parser.add_argument(
        "--gateway-scrape-interval",
        default="30s",
        metavar="DURATION",
        help="scrape interval of those ServiceMonitors (default 30s)",
    )


def options_from_args(args: argparse.Namespace) -> OperatorOptions:
    """The options :func:`add_arguments`' flags give: each flag's ``dest`` is its field's name, and a
    repeatable flag's list becomes the field's tuple."""
    values: dict[str, Any] = {}
    for field in fields(OperatorOptions):
        value = getattr(args, field.name)
        values[field.name] = tuple(value) if isinstance(value, list) else value
    return OperatorOptions(**values)


def configure_logging(options: OperatorOptions) -> None:
    """kopf's log handler on the root logger: text lines, or one JSON object per line (``--log-format
    json``) with the resource a line is about under :data:`LOG_REFKEY` (kopf's per-object lines, and ours
    logged with ``extra=kube.log_ref(obj)``)."""
    import kopf

    if options.log_format == "json":
        kopf.configure(verbose=options.verbose, log_format=kopf.LogFormat.JSON, log_refkey=LOG_REFKEY)
    else:  # the resource as a [namespace/name] prefix, as kopf's own command line does
        kopf.configure(verbose=options.verbose, log_prefix=True)


def run(options: OperatorOptions) -> int:
    """Block until the operator is stopped (SIGTERM/SIGINT); returns the exit code."""
    import kopf  # heavy; imported here so `tierkeeper --help` stays fast

    from storage_core.adapters.kafka_client_config import parse_config_dirs
    from storage_core.jobs.resource_files import load_clusters
    from tierkeeper_operator.background import RoundsOptions
    from tierkeeper_operator.handlers import build_registry

    if options.reconcile_interval <= 0:
        raise ConfigError(f"--reconcile-interval must be > 0, got {options.reconcile_interval}")
    if options.peering_lifetime < 5:
        raise ConfigError(f"--peering-lifetime must be >= 5 seconds, got {options.peering_lifetime}")
    clusters = load_clusters(options.cluster_files, secrets_allowed=True)
    config_dirs = parse_config_dirs(list(options.kafka_config_dirs), clusters)
    identity = own_identity()
    peering = None
    if not options.no_peering:
        peering = PeeringConfig(
            name=options.peering_name,
            priority=default_priority() if options.priority is None else options.priority,
            lifetime=options.peering_lifetime,
            identity=identity,
        )
    rounds = RoundsOptions(
        interval=options.reconcile_interval,
        namespaces=options.namespaces,
        kafka_config_dirs=config_dirs,
        gateway_settings=options.gateway_settings(),
        peering=peering,
        identity=identity,
        metrics_port=options.metrics_port,
        readiness_endpoint=options.readiness_endpoint,
        topic_labels=options.metrics_topic_labels,
    )
    configure_logging(options)
    kopf.run(
        registry=build_registry(clusters, rounds=rounds, namespaced=not options.all_namespaces),
        standalone=options.no_peering,  # kopf's name for it
        clusterwide=options.all_namespaces,
        namespaces=options.namespaces,
        liveness_endpoint=options.liveness_endpoint,
        peering_name=None if peering is None else peering.name,
        priority=None if peering is None else peering.priority,
        identity=None if peering is None else peering.identity,  # type: ignore[arg-type]
    )
    return 0
