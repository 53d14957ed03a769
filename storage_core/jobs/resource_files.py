"""The files an operator or standalone run is configured from: cluster configurations (YAML, one or more
clusters per file) and, for standalone mode, a directory of TieredTopic/TieredBroker/TieredCluster
manifests."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import ManifestSet, parse_cluster_config, parse_manifests, parse_spec
from storage_core.api.tiered_cluster import TieredClusterSpec, resolve
from storage_core.errors import ConfigError


def load_clusters(
    paths: Sequence[Path], *, secrets_allowed: bool = False, mounted: Collection[str] = ()
) -> dict[str, KafkaClusterConfig]:
    """Cluster configurations by name from YAML files. ``secrets_allowed``: the operator resolves Secret
    references (Jobs mount them; its own clients read them as mounted files). Standalone mode has no
    Secrets: it refuses a ``storageOptionsSecretRef`` rather than run without credentials, and a
    ``clientConfigSecretRef`` unless ``mounted`` names the cluster (``--kafka-config-dir CLUSTER=DIR``,
    a directory laid out as the Secret would be mounted)."""
    clusters: dict[str, KafkaClusterConfig] = {}
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read cluster configuration {path}: {exc.strerror}") from None
        for cluster in parse_cluster_config(text, str(path)):
            if cluster.name in clusters:
                raise ConfigError(f"{path}: cluster {cluster.name!r} is defined twice")
            if not secrets_allowed:
                _standalone_usable(cluster, str(path), mounted)
            clusters[cluster.name] = cluster
    return clusters


def _standalone_usable(cluster: KafkaClusterConfig, source: str, mounted: Collection[str]) -> None:
    if cluster.remote.storage_options_secret_ref:
        raise ConfigError(
            f"{source}: cluster {cluster.name!r} references a Secret; standalone mode reads no "
            "Secrets (put non-secret values in remote.storageOptions and credentials in the "
            "storage provider's environment)"
        )
    if cluster.client_config_secret_ref and cluster.name not in mounted:
        raise ConfigError(
            f"{source}: cluster {cluster.name!r} has a clientConfigSecretRef; standalone mode reads "
            f"no Secrets: give --kafka-config-dir {cluster.name}=DIR, a directory with one file "
            "per client property"
        )


def manifest_clusters(
    manifests: ManifestSet, files: dict[str, KafkaClusterConfig], *, mounted: Collection[str] = ()
) -> dict[str, KafkaClusterConfig]:
    """``files`` plus the TieredClusters of the manifests (standalone mode). A TieredCluster that names a
    Strimzi Kafka without bootstrapServers, or whose name a ``--cluster`` file also defines, is refused
    with one line: standalone mode reads no Kubernetes objects, and one name is one cluster."""
    clusters = dict(files)
    for obj in manifests.objects:
        if obj.kind != "TieredCluster":
            continue
        where = f"{obj.source}: TieredCluster {obj.key}"
        if obj.name in clusters:
            raise ConfigError(f"{where}: cluster {obj.name!r} is also defined by a --cluster file; keep one")
        parsed = parse_spec(TieredClusterSpec, obj.spec)
        if parsed.value is None:
            raise ConfigError(f"{where}: {parsed.problem}")
        try:
            cluster = resolve(obj.name, parsed.value)
        except ValueError:
            raise ConfigError(
                f"{where}: spec.bootstrapServers is required in standalone mode (it reads no Strimzi Kafka)"
            ) from None
        _standalone_usable(cluster, where, mounted)
        clusters[cluster.name] = cluster
    return clusters


def load_manifests(directory: Path) -> ManifestSet:
    if not directory.is_dir():
        raise ConfigError(f"--manifests {directory}: not a directory")
    out = ManifestSet()
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        parse_manifests(path.read_text(encoding="utf-8"), str(path), out)
    keys = [(o.kind, o.key) for o in out.objects]
    duplicates = sorted({f"{kind} {key}" for kind, key in keys if keys.count((kind, key)) > 1})
    if duplicates:
        raise ConfigError(f"{directory}: defined more than once: {', '.join(duplicates)}")
    return out
