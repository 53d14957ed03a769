"""Run the operator in this process: the entry point behind ``tierkeeper operator`` and
``python -m tierkeeper_operator``.

Replicas elect the active one through kopf peering (:mod:`tierkeeper_operator.peering`): kopf pauses the
handlers of a standby and the reconcile rounds follow the same rule. ``--no-peering`` (or kopf's name for
it, ``--standalone``, which is not ``tierkeeper standalone``: that runs the rounds without Kubernetes) runs
without peering (exactly one replica must run then).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tierkeeper_operator.peering import DEFAULT_LIFETIME, DEFAULT_PEERING_NAME
from tierkeeper_operator.settings import (
    ClusterSettings,
    GatewaySettings,
    LoggingSettings,
    MetricsSettings,
    OperatorSettings,
    PeeringSettings,
    ProbeSettings,
    RoundSettings,
    ScopeSettings,
    key_values,
)

LOG_REFKEY = "object"
"""Key of the resource reference (apiVersion, kind, namespace, name, uid) in JSON log lines."""


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


def settings_from_args(args: argparse.Namespace) -> OperatorSettings:
    """The settings :func:`add_arguments`' flags give (a bad value is refused here, by its flag)."""
    return OperatorSettings(
        scope=ScopeSettings(namespaces=tuple(args.namespaces), all_namespaces=args.all_namespaces),
        logging=LoggingSettings(verbose=args.verbose, format=args.log_format),
        clusters=ClusterSettings(
            files=tuple(args.cluster_files), kafka_config_dirs=tuple(args.kafka_config_dirs)
        ),
        rounds=RoundSettings(interval=args.reconcile_interval),
        probes=ProbeSettings(liveness=args.liveness_endpoint, readiness=args.readiness_endpoint),
        metrics=MetricsSettings(port=args.metrics_port, topic_labels=args.metrics_topic_labels),
        peering=PeeringSettings(
            standalone=args.no_peering,
            name=args.peering_name,
            priority=args.priority,
            lifetime=args.peering_lifetime,
        ),
        gateway=GatewaySettings(
            service_monitor=args.gateway_service_monitors,
            service_monitor_labels=key_values(
                "--gateway-service-monitor-label", tuple(args.gateway_service_monitor_labels)
            ),
            scrape_interval=args.gateway_scrape_interval,
        ),
    )


def configure_logging(settings: LoggingSettings) -> None:
    """kopf's log handler on the root logger: text lines, or one JSON object per line (``--log-format
    json``) with the resource a line is about under :data:`LOG_REFKEY` (kopf's per-object lines, and ours
    logged with ``extra=kube.log_ref(obj)``)."""
    import kopf

    if settings.format == "json":
        kopf.configure(verbose=settings.verbose, log_format=kopf.LogFormat.JSON, log_refkey=LOG_REFKEY)
    else:  # the resource as a [namespace/name] prefix, as kopf's own command line does
        kopf.configure(verbose=settings.verbose, log_prefix=True)


def run(told: OperatorSettings) -> int:
    """Block until the operator is stopped (SIGTERM/SIGINT); returns the exit code."""
    import kopf  # heavy; imported here so `tierkeeper --help` stays fast

    from storage_core.jobs.resource_files import load_clusters
    from tierkeeper_operator.compose import kafka_config_dirs
    from tierkeeper_operator.handlers import build_registry

    settings = told.for_this_process()  # from here on passed down unchanged
    clusters = load_clusters(settings.clusters.files, secrets_allowed=True)
    kafka_config_dirs(settings, clusters)  # a flag naming no such cluster stops the operator here
    configure_logging(settings.logging)
    peering = settings.peering
    kopf.run(
        registry=build_registry(clusters, settings=settings),
        standalone=peering.standalone,
        clusterwide=settings.scope.all_namespaces,
        namespaces=settings.scope.namespaces,
        liveness_endpoint=settings.probes.liveness,
        peering_name=None if peering.standalone else peering.name,
        priority=None if peering.standalone else peering.priority,
        identity=None if peering.standalone else peering.identity,  # type: ignore[arg-type]
    )
    return 0
