"""Run the operator in this process: the entry point behind ``tierkeeper operator`` and
``python -m tierkeeper_operator``.

The operator runs kopf standalone (no peering): the chart deploys one replica with the Recreate
strategy, so two operators never handle the same object.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path


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
    cluster_files: tuple[Path, ...] = ()
    """Cluster configuration files (the chart mounts its ConfigMap of values ``clusters:``)."""
    reconcile_interval: float = 30.0
    """Seconds between reconcile rounds (Kafka observed, Jobs run, status written)."""
    metrics_port: int | None = None
    """Serve Prometheus /metrics on this port; None: no metrics endpoint."""


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
        "--cluster",
        action="append",
        type=Path,
        default=[],
        dest="cluster_files",
        metavar="CLUSTER.yaml",
        help="cluster configuration file that clusterRef names resolve against (repeatable)",
    )
    parser.add_argument(
        "--reconcile-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds between reconcile rounds (default 30); each topic's copy and cleanup intervals "
        "decide what runs",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port"
    )


def options_from_args(args: argparse.Namespace) -> OperatorOptions:
    return OperatorOptions(
        namespaces=tuple(args.namespaces),
        all_namespaces=bool(args.all_namespaces),
        liveness_endpoint=args.liveness_endpoint,
        verbose=bool(args.verbose),
        cluster_files=tuple(args.cluster_files),
        reconcile_interval=float(args.reconcile_interval),
        metrics_port=args.metrics_port,
    )


def run(options: OperatorOptions) -> int:
    """Block until the operator is stopped (SIGTERM/SIGINT); returns the exit code."""
    import kopf  # heavy; imported here so `tierkeeper --help` stays fast

    from storage_core.jobs.standalone import load_clusters
    from tierkeeper_operator.handlers import build_registry

    if options.reconcile_interval <= 0:
        from storage_core.errors import ConfigError

        raise ConfigError(f"--reconcile-interval must be > 0, got {options.reconcile_interval}")
    clusters = load_clusters(options.cluster_files, secrets_allowed=True)
    kopf.configure(verbose=options.verbose)
    kopf.run(
        registry=build_registry(
            clusters,
            reconcile_interval=options.reconcile_interval,
            namespaces=options.namespaces,
            metrics_port=options.metrics_port,
        ),
        standalone=True,
        clusterwide=options.all_namespaces,
        namespaces=options.namespaces,
        liveness_endpoint=options.liveness_endpoint,
    )
    return 0
