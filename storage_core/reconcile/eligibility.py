"""Can a topic be tiered safely, judged from its Kafka configuration? Refusals are returned, never fixed:
Tierkeeper does not change a user's topic configuration (docs/operator.md says why).

Whether a topic may be copied at all (``cleanup.policy`` containing ``compact``; ``remote.storage.enable=
true``; no ``cleanup.policy`` reported) is :func:`storage_core.tiering.eligibility.copy_refusal`'s decision,
the same one the copy and cleanup commands make; here it only gets a CamelCase reason for the Stalled
condition. The planner adds one rule of its own. It differs from cleanup's local-trim check
(``local_trim_refusal``: Kafka's retention must exceed the local window + copy interval + a margin),
which the cleanup Jobs still apply, so a topic the planner accepts may still have its trim skipped there:

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
from storage_core.tiering.eligibility import RefusalReason, copy_refusal

_REASONS = {
    RefusalReason.COMPACTED: "CompactedTopic",
    RefusalReason.KAFKA_TIERING: "KafkaTieringEnabled",
    RefusalReason.CONFIGS_UNKNOWN: "TopicConfigsUnknown",
}


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
    refused = copy_refusal(topic, configs)
    if refused is not None:
        out.append(Refusal(_REASONS.get(refused.reason, "NotTierable"), str(refused)))
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
