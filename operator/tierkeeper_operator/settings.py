"""The operator's settings: one frozen tree of small groups (as kopf's ``OperatorSettings``), each field with
its default and what it means.

Built once at start, from the command line (:func:`tierkeeper_operator.run.settings_from_args`) and this
process (:meth:`OperatorSettings.for_this_process`: the peer id from ``POD_ID``, the start-time
priority), and handed whole and unchanged to whatever needs a part of it: kopf's run, the registry, the
composition root (:mod:`.compose`). A value is checked where its group is made, so a bad flag stops the
operator before anything runs. kopf's own settings are adjusted in :mod:`.kopf_settings`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from storage_core.api.cluster_parts import DEFAULT_GATEWAY_METRICS_PORT
from storage_core.errors import ConfigError
from tierkeeper_operator.peering import DEFAULT_LIFETIME, DEFAULT_PEERING_NAME, default_priority, own_identity


@dataclass(frozen=True)
class ScopeSettings:
    """Where the operator watches."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch (the command line requires these or ``all_namespaces``)."""
    all_namespaces: bool = False
    """Watch every namespace (needs the ClusterRole of the chart)."""


@dataclass(frozen=True)
class LoggingSettings:
    verbose: bool = False
    """Log at DEBUG level."""
    format: Literal["text", "json"] = "text"
    """``text`` (kopf's usual lines) or ``json``: one JSON object per line, with ``object`` holding the
    resource's apiVersion, kind, namespace and name on lines about one resource."""


@dataclass(frozen=True)
class ClusterSettings:
    """The clusters of files (TieredClusters are listed by the rounds)."""

    files: tuple[Path, ...] = ()
    """Cluster configuration files (the chart mounts its ConfigMap of values ``clusters:``)."""
    kafka_config_dirs: tuple[str, ...] = ()
    """``CLUSTER=DIR``: where a file cluster's clientConfigSecretRef Secret is mounted in this pod (checked
    against the clusters once they are loaded)."""


@dataclass(frozen=True)
class RoundSettings:
    interval: float = 30.0
    """Seconds between full reconcile rounds (Kafka observed, Jobs run, status written), or less when a
    topic's copy or cleanup falls due sooner; new or edited TieredTopics are judged sooner still, by quick
    rounds (:mod:`tierkeeper_operator.wakeups`)."""

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ConfigError(f"--reconcile-interval must be > 0, got {self.interval}")


@dataclass(frozen=True)
class ProbeSettings:
    liveness: str | None = None
    """kopf's liveness endpoint, e.g. http://0.0.0.0:8080/healthz; None: no endpoint."""
    readiness: str | None = None
    """The readiness endpoint (:mod:`.probes`), e.g. http://0.0.0.0:8081/readyz; None: no endpoint."""


@dataclass(frozen=True)
class MetricsSettings:
    port: int | None = None
    """Serve Prometheus /metrics on this port; None: no metrics endpoint."""
    topic_labels: bool = False
    """Per-TieredTopic gauges (one series per topic; off by default)."""


@dataclass(frozen=True)
class PeeringSettings:
    """How this replica takes part in peering (:mod:`.peering`)."""

    standalone: bool = False
    """No peering (kopf's name; ``--no-peering``): this must be the only replica."""
    name: str = DEFAULT_PEERING_NAME
    """Name of the KopfPeering (per watched namespace) or ClusterKopfPeering (all namespaces)."""
    priority: int | None = None
    """Peering priority; None: minus the start time in microseconds (the oldest replica is active), set
    once by :meth:`OperatorSettings.for_this_process`."""
    lifetime: int = DEFAULT_LIFETIME
    """Seconds a replica's keep-alive counts; a killed active replica is replaced after at most this."""
    identity: str = ""
    """This replica's peer id, also written on the Jobs it creates (set once by
    :meth:`OperatorSettings.for_this_process`; empty: not written)."""

    def __post_init__(self) -> None:
        if self.lifetime < 5:
            raise ConfigError(f"--peering-lifetime must be >= 5 seconds, got {self.lifetime}")


@dataclass(frozen=True)
class GatewaySettings:
    """What the operator's own configuration (the chart) says about every TieredCluster's gateway."""

    service_monitor: bool = False
    """Also keep a prometheus-operator ServiceMonitor per gateway (chart: metrics.serviceMonitor.enabled)."""
    service_monitor_labels: Mapping[str, str] = field(default_factory=dict)
    """Extra labels of the ServiceMonitors (what the Prometheus' serviceMonitorSelector matches)."""
    scrape_interval: str = "30s"
    """Their scrape interval."""
    metrics_port: int = DEFAULT_GATEWAY_METRICS_PORT
    """The pods' /metrics, /readyz and /healthz port (also on the Service, for the ServiceMonitor)."""


@dataclass(frozen=True)
class OperatorSettings:
    """Everything the operator was told, by group."""

    scope: ScopeSettings = field(default_factory=ScopeSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    clusters: ClusterSettings = field(default_factory=ClusterSettings)
    rounds: RoundSettings = field(default_factory=RoundSettings)
    probes: ProbeSettings = field(default_factory=ProbeSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    peering: PeeringSettings = field(default_factory=PeeringSettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)

    def for_this_process(self, environ: Mapping[str, str] = os.environ) -> OperatorSettings:
        """These settings with what this process is filled in where the command line left it open: the
        peer id (``POD_ID``, which the chart sets, else user, host and process) and the default priority
        (minus the start time: computed once, so every reader sees the same)."""
        peering = self.peering
        return replace(
            self,
            peering=replace(
                peering,
                identity=peering.identity or own_identity(environ),
                priority=default_priority() if peering.priority is None else peering.priority,
            ),
        )


def key_values(flag: str, items: tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE`` flags (repeatable) as a mapping; a malformed one is refused by name."""
    values = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {item!r}: expected KEY=VALUE")
        values[key] = value
    return values
