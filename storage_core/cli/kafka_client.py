"""Kafka client properties for the commands that talk to Kafka (``copy``'s eligibility check, ``cleanup``'s
DeleteRecords): non-secret ones as flags, secret ones (SASL passwords, TLS keys) from a directory where
each file is one property, which is how Kubernetes mounts a Secret whose keys are property names. Secrets
never go in the process arguments or the pod spec, and no message quotes a value.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from storage_core.adapters.kafka_client_config import merged_client_config, read_config_dir
from storage_core.api.cluster import credential_like
from storage_core.errors import ConfigError

CONFIG_DIR_ENV = "TIERKEEPER_KAFKA_CONFIG_DIR"


def add_kafka_client_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Kafka client")
    group.add_argument(
        "--kafka-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a non-secret librdkafka client property (security.protocol, ssl.ca.location, client.id); "
        "repeatable. Secrets are refused here: use --kafka-config-dir",
    )
    group.add_argument(
        "--kafka-config-dir",
        metavar="DIR",
        help="a directory of client properties, one file per property named after it (a mounted "
        f"Secret: sasl.username, sasl.password, ...); default ${CONFIG_DIR_ENV}",
    )


def kafka_client_config(args: argparse.Namespace, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The client properties: the directory's, then ``--kafka-property`` (which wins)."""
    properties: dict[str, str] = {}
    directory = _config_dir(args, environ)
    for n, item in enumerate(getattr(args, "kafka_property", None) or [], 1):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--kafka-property number {n}: expected KEY=VALUE")
        if credential_like(key):
            raise ConfigError(
                f"--kafka-property {key.strip()}: looks like a secret; put it in a file of --kafka-config-dir"
            )
        properties[key.strip()] = value
    return merged_client_config(properties, Path(directory) if directory else None)


def _config_dir(args: argparse.Namespace, environ: dict[str, str] | None) -> str | None:
    """``--kafka-config-dir``, else ``$TIERKEEPER_KAFKA_CONFIG_DIR``."""
    env = os.environ if environ is None else environ
    return getattr(args, "kafka_config_dir", None) or env.get(CONFIG_DIR_ENV)


def kafka_client_files(args: argparse.Namespace, environ: dict[str, str] | None = None) -> list[str]:
    """The directory :func:`kafka_client_config` reads and its property files (for a process that reads
    them again when they change); empty without a directory."""
    directory = _config_dir(args, environ)
    if not directory:
        return []
    try:
        entries = sorted(p for p in Path(directory).iterdir() if not p.name.startswith("."))
    except OSError:
        entries = []
    return [directory, *(str(p) for p in entries)]


__all__ = [
    "CONFIG_DIR_ENV",
    "add_kafka_client_args",
    "kafka_client_config",
    "kafka_client_files",
    "read_config_dir",
]
