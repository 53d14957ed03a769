"""The rebuild settings a broker pod's init container reads: one file per cluster and namespace.

The operator renders it from the cluster configuration and every TieredBroker of that cluster into the
ConfigMap ``tierkeeper-rebuild-<cluster>`` (key ``settings.json``) and keeps it current; the broker pods
mount it and run ``tierkeeper rebuild --if-empty --settings <file> --broker-id-from-pod-name $(POD_NAME)``.
One file serves a whole node pool, because every pod of a StatefulSet or KafkaNodePool shares one pod
template: each pod finds its own entry by broker id. Nothing secret is in it (credentials reach the init
container through the Secret the cluster configuration names, as environment variables).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationError

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.fields import ThreadCount
from storage_core.api.resources import TieredBrokerSpec
from storage_core.api.rules import ApiModel
from storage_core.errors import ConfigError

SETTINGS_KEY = "settings.json"
SETTINGS_VERSION = 1
_TRAILING_NUMBER = re.compile(r"(\d+)$")


def settings_config_map_name(cluster: str) -> str:
    """The ConfigMap holding a cluster's rebuild settings (at most 63 characters, as names go)."""
    return f"tierkeeper-rebuild-{cluster}"[:63].rstrip("-.")


class BrokerRebuild(ApiModel):
    """One TieredBroker's part of the settings."""

    tiered_broker: str = Field(description="The TieredBroker this entry comes from.")
    log_dir: str = Field(description="The broker's log directory as the broker's pod sees it.")
    extra_log_dirs: list[str] = Field(
        default_factory=list,
        # Left out when empty, so an init container of the release before JBOD (whose model rejects
        # unknown fields) still reads the settings of a broker with one log dir during an upgrade.
        exclude_if=lambda dirs: not dirs,
        description="The broker's other log directories (JBOD), the same way.",
    )
    policy: Literal["Never", "WhenLogDirEmpty"] = Field(description="spec.rebuild.policy.")
    parallelism: ThreadCount = Field(description="Downloads at once.")

    def log_dirs(self) -> list[str]:
        return [self.log_dir, *self.extra_log_dirs]


class RemoteSettings(ApiModel):
    url: str
    storage_options: dict[str, Any] = Field(default_factory=dict)


class RebuildSettings(ApiModel):
    """Everything ``tierkeeper rebuild --if-empty`` needs besides credentials."""

    version: int = SETTINGS_VERSION
    cluster: str
    bootstrap_servers: str
    client_config: dict[str, str] = Field(default_factory=dict)
    remote: RemoteSettings
    brokers: dict[str, BrokerRebuild] = Field(
        default_factory=dict, description="By broker id (node.id), as a string."
    )

    def for_broker(self, broker_id: int) -> BrokerRebuild | None:
        return self.brokers.get(str(broker_id))


def render_settings(
    cluster: KafkaClusterConfig, brokers: list[tuple[str, TieredBrokerSpec]]
) -> RebuildSettings:
    """The settings of ``cluster`` from its TieredBrokers (name, spec); the first entry of a broker id
    wins (two TieredBrokers for one broker are reported by the caller)."""
    entries: dict[str, BrokerRebuild] = {}
    for name, spec in sorted(brokers):
        entries.setdefault(
            str(spec.broker_id),
            BrokerRebuild(
                tiered_broker=name,
                log_dir=spec.log_dir.path,
                extra_log_dirs=[d.path for d in spec.extra_log_dirs],
                policy=spec.rebuild.policy,
                parallelism=spec.rebuild.parallelism,
            ),
        )
    return RebuildSettings(
        cluster=cluster.name,
        bootstrap_servers=cluster.bootstrap_servers,
        client_config=dict(cluster.client_config),
        remote=RemoteSettings(url=cluster.remote.url, storage_options=dict(cluster.remote.storage_options)),
        brokers=dict(sorted(entries.items(), key=lambda kv: int(kv[0]))),
    )


def dump_settings(settings: RebuildSettings) -> str:
    return settings.model_dump_json(by_alias=True, indent=2)


def load_settings(text: str, source: str) -> RebuildSettings:
    """Parse a settings file; a bad one is a one-line ConfigError naming the file."""
    try:
        settings = RebuildSettings.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigError(f"rebuild settings {source}: {where}: {first['msg']}") from None
    if settings.version != SETTINGS_VERSION:
        raise ConfigError(f"rebuild settings {source}: version {settings.version} is not {SETTINGS_VERSION}")
    return settings


def broker_id_from_pod_name(name: str) -> int:
    """The node id a pod's name ends with: ``<cluster>-<pool>-<id>`` (Strimzi node pools) or a
    StatefulSet's ``<name>-<ordinal>`` where node.id is the ordinal."""
    match = _TRAILING_NUMBER.search(name)
    if match is None:
        raise ConfigError(f"pod name {name!r} does not end with a broker id")
    return int(match.group(1))
