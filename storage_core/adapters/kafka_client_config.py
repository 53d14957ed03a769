"""Kafka client properties from a directory laid out as Kubernetes mounts a Secret (one file per property,
named after it), merged with the non-secret properties given inline. The one reader of such a directory:
the CLI's ``--kafka-config-dir`` (the operator's Jobs), the operator's own Kafka clients and standalone
mode all go through :func:`read_config_dir` and :func:`merged_client_config`, so a property means the
same in every process. No message quotes a value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.errors import ConfigError, TierkeeperError

T = TypeVar("T")


def kafka_admin(bootstrap_servers: str, config: dict[str, str]) -> Any:
    """A ``KafkaAdmin`` (the default client factory of :class:`ClusterClients` and the copy job); the
    import waits for the first use, so importing the operator or the CLI does not load the Kafka client."""
    from storage_core.adapters.kafka_admin import KafkaAdmin

    return KafkaAdmin(bootstrap_servers, config)


def read_config_dir(directory: Path, source: str = "--kafka-config-dir") -> dict[str, str]:
    """Every regular file of ``directory`` is a property (its name) and its value (the text, without a
    final newline). Names starting with a dot are skipped: a mounted Secret keeps its ``..data``
    bookkeeping there. ``source`` names the directory in errors (the flag, or the cluster it is for)."""
    if not directory.is_dir():
        raise ConfigError(f"{source} {directory}: not a directory")
    config = {}
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise ConfigError(f"{source} {directory}: cannot list it: {type(exc).__name__}") from None
    for path in entries:
        if path.name.startswith(".") or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: cannot read {path.name}: {type(exc).__name__}") from None
        config[path.name] = text.removesuffix("\n").removesuffix("\r")
    return config


def merged_client_config(
    properties: Mapping[str, str], directory: Path | None, source: str = "--kafka-config-dir"
) -> dict[str, str]:
    """The directory's properties, then ``properties`` over them (the inline, non-secret ones win, as
    ``--kafka-property`` wins over ``--kafka-config-dir`` in a Job)."""
    config = read_config_dir(directory, source) if directory is not None else {}
    config.update(properties)
    return config


def cluster_client_config(cluster: KafkaClusterConfig, directory: Path | None) -> dict[str, str]:
    """A cluster's full client properties for a client of this process: ``clientConfig`` over the files
    of ``directory``, where this process has the cluster's ``clientConfigSecretRef`` Secret mounted.

    A cluster that names a Secret needs its directory, holding at least one property: the chart mounts
    the Secret as optional, so a Secret that does not exist shows as an empty directory, and running
    without the credentials would only fail later with a less clear message."""
    secret = cluster.client_config_secret_ref
    if secret is None:
        return dict(cluster.client_config)
    where = f"cluster {cluster.name}: clientConfigSecretRef {secret.name}:"
    if directory is None:
        raise ConfigError(f"{where} no --kafka-config-dir {cluster.name}=DIR names where it is mounted")
    config = read_config_dir(directory, f"{where} directory")
    if not config:
        raise ConfigError(
            f"{where} directory {directory} holds no properties (does the Secret exist in the operator's "
            "namespace?)"
        )
    config.update(cluster.client_config)
    return config


def parse_config_dirs(items: list[str], clusters: Mapping[str, KafkaClusterConfig]) -> dict[str, Path]:
    """``--kafka-config-dir CLUSTER=DIR`` flags (repeatable) of the operator and standalone mode: where
    each cluster's ``clientConfigSecretRef`` Secret is mounted. A flag for an unknown cluster, for one
    that names no Secret, or given twice is refused: each is a mistake that would be silent otherwise."""
    dirs: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--kafka-config-dir {item}: expected CLUSTER=DIR")
        if name not in clusters:
            raise ConfigError(f"--kafka-config-dir {item}: no cluster {name!r} is configured")
        if clusters[name].client_config_secret_ref is None:
            raise ConfigError(f"--kafka-config-dir {item}: cluster {name!r} has no clientConfigSecretRef")
        if name in dirs:
            raise ConfigError(f"--kafka-config-dir: cluster {name!r} given twice")
        dirs[name] = Path(path)
    return dirs


class ClusterClients(Generic[T]):
    """One Kafka client per cluster, made by ``factory(bootstrap_servers, properties)`` with the
    cluster's full client properties (:func:`cluster_client_config`).

    :meth:`refresh` (once per round) makes the next use re-read the mounted directories: the kubelet
    updates a mounted Secret in place, so rotated credentials get a new client and a Secret created after
    the start is picked up, with no restart. Within a round every use sees the same answer; a cluster
    whose properties cannot be read (or whose client refuses them) raises the same error on each use."""

    def __init__(
        self,
        clusters: Mapping[str, KafkaClusterConfig],
        config_dirs: Mapping[str, Path],
        factory: Callable[[str, dict[str, str]], T],
        secret_reader: Callable[[str], dict[str, str] | None] | None = None,
    ) -> None:
        self._clusters = clusters
        self._dirs = dict(config_dirs)
        self._factory = factory
        self._secret_reader = secret_reader
        """Cluster name -> its clientConfigSecretRef Secret's properties, read by name (TieredClusters),
        or None for a cluster whose Secret is a mounted directory (file entries)."""
        self._made: dict[str, tuple[tuple[str, dict[str, str]], T]] = {}
        self._checked: dict[str, TierkeeperError | None] = {}

    def refresh(self) -> None:
        self._checked.clear()

    def __call__(self, name: str) -> T:
        return self._current(name)[1]

    def discard(self, name: str) -> None:
        """Make the next use build a new client for ``name``: one whose request failed may hold stale
        metadata (e.g. a controller or leader that has stopped) that it would keep waiting on, while a new
        one starts again from the bootstrap servers."""
        self._made.pop(name, None)
        self._checked.pop(name, None)

    def config(self, name: str) -> dict[str, str]:
        """The properties the cluster's client was made with (for a command run in this process)."""
        return dict(self._current(name)[0][1])

    def _config(self, cluster: KafkaClusterConfig) -> dict[str, str]:
        secret = cluster.client_config_secret_ref
        read = None
        if secret is not None and self._secret_reader is not None:
            read = self._secret_reader(cluster.name)
        if secret is None or read is None:
            return cluster_client_config(cluster, self._dirs.get(cluster.name))
        if not read:
            raise ConfigError(
                f"cluster {cluster.name}: clientConfigSecretRef {secret.name} holds no properties"
            )
        return {**read, **cluster.client_config}

    def _current(self, name: str) -> tuple[tuple[str, dict[str, str]], T]:
        if name not in self._checked:
            cluster = self._clusters[name]
            self._checked[name] = None
            try:
                config = self._config(cluster)
                made = self._made.get(name)
                # A changed bootstrap address (a TieredCluster edited) needs a new client too.
                if made is None or made[0] != (cluster.bootstrap_servers, config):
                    self._made.pop(name, None)
                    client = self._factory(cluster.bootstrap_servers, config)
                    self._made[name] = ((cluster.bootstrap_servers, config), client)
            except TierkeeperError as exc:  # e.g. the client refused a property: same answer all round
                self._checked[name] = exc
        problem = self._checked[name]
        if problem is not None:
            raise problem
        return self._made[name]
