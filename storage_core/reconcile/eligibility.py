"""Can a topic be tiered safely, judged from its Kafka configuration? Refusals are returned, never fixed:
Tierkeeper does not change a user's topic configuration (docs/operator.md says why).

- ``cleanup.policy`` containing ``compact``: the log cleaner rewrites segments after they are rolled, so a
  tiered copy would disagree with the broker (Kafka itself refuses to tier compacted topics).
- ``remote.storage.enable=true``: Kafka's own tiered storage owns the topic; two tiers would race.
- Kafka's ``retention.ms`` / ``retention.bytes`` deleting segments that the remote retention still wants:
  Tierkeeper trims local data itself (DeleteRecords, only behind the tier), so Kafka's own retention must
  be infinite or at least as long as the remote retention; otherwise Kafka deletes segments before they
  are tiered, and a log start Kafka moved also deletes the remote copies below it (as in KIP-405).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from storage_core.api.fields import INFINITE
from storage_core.api.resources import TieredTopicSpec


@dataclass(frozen=True)
class Refusal:
    reason: str
    """CamelCase reason for the Stalled condition."""
    message: str


def _number(configs: Mapping[str, str], key: str) -> int | None:
    try:
        return int(configs[key])
    except (KeyError, ValueError):
        return None


def _retention_covers(kafka_value: int | None, remote: int) -> bool:
    if kafka_value is None or kafka_value < 0:
        return True
    return remote != INFINITE and kafka_value >= remote


def refusals(topic: str, configs: Mapping[str, str], spec: TieredTopicSpec) -> list[Refusal]:
    """Every reason ``topic`` with ``configs`` cannot be tiered as ``spec`` asks; empty when it can."""
    out: list[Refusal] = []
    policy = {p.strip() for p in configs.get("cleanup.policy", "delete").split(",")}
    if "compact" in policy:
        out.append(
            Refusal(
                "CompactedTopic",
                f"topic {topic} has cleanup.policy={configs.get('cleanup.policy')}: the log cleaner rewrites "
                "segments, so compacted topics cannot be tiered",
            )
        )
    if configs.get("remote.storage.enable", "false").strip().lower() == "true":
        out.append(
            Refusal(
                "KafkaTieringEnabled",
                f"topic {topic} has remote.storage.enable=true: Kafka's own tiered storage owns it; "
                "turn one of the two off",
            )
        )
    for key, remote, field in (
        ("retention.ms", spec.remote_retention_ms, "remoteRetentionMs"),
        ("retention.bytes", spec.remote_retention_bytes, "remoteRetentionBytes"),
    ):
        value = _number(configs, key)
        if not _retention_covers(value, remote):
            wanted = "-1 (infinite)" if remote == INFINITE else f"-1 or >= {remote}"
            out.append(
                Refusal(
                    "KafkaRetentionTooShort",
                    f"topic {topic} has {key}={value}, which deletes segments before the remote retention "
                    f"({field}={remote}) is over and possibly before they are tiered; set {key} to {wanted} "
                    "(Tierkeeper trims local data itself, behind the tier)",
                )
            )
    return out
