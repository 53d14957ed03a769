"""The files an operator or standalone run is configured from: cluster configurations (YAML, one or more
clusters per file) and, for standalone mode, a directory of TieredTopic/TieredBroker manifests."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import ManifestSet, parse_cluster_config, parse_manifests
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
            if not secrets_allowed and cluster.remote.storage_options_secret_ref:
                raise ConfigError(
                    f"{path}: cluster {cluster.name!r} references a Secret; standalone mode reads no "
                    "Secrets (put non-secret values in remote.storageOptions and credentials in the "
                    "storage provider's environment)"
                )
            if not secrets_allowed and cluster.client_config_secret_ref and cluster.name not in mounted:
                raise ConfigError(
                    f"{path}: cluster {cluster.name!r} has a clientConfigSecretRef; standalone mode reads "
                    f"no Secrets: give --kafka-config-dir {cluster.name}=DIR, a directory with one file "
                    "per client property"
                )
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
