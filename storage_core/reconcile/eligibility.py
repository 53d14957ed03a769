"""Can a topic be tiered safely, judged from its Kafka configuration? Refusals are returned, never fixed:
Tierkeeper does not change a user's topic configuration (docs/operator.md says why).

The rules are :mod:`storage_core.tiering.eligibility`'s (stated in docs/reliability.md, "The retention
rules, precisely"), asked with the topic's windows, remote retention and copy interval; the copy and
cleanup requests carry the same copy interval (:mod:`storage_core.reconcile.requests`). Here a refusal
only gets a CamelCase reason for the Stalled condition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from storage_core.api.resources import TieredTopicSpec
from storage_core.reconcile.schedule import copy_interval_ms
from storage_core.retention.policy import RetentionPolicy
from storage_core.tiering.eligibility import RefusalReason, TrimTiming, local_trim_refusal

_REASONS = {
    RefusalReason.COMPACTED: "CompactedTopic",
    RefusalReason.KAFKA_TIERING: "KafkaTieringEnabled",
    RefusalReason.CONFIGS_UNKNOWN: "TopicConfigsUnknown",
    RefusalReason.RETENTION_TIME: "KafkaRetentionTooShort",
    RefusalReason.RETENTION_SIZE: "KafkaRetentionTooShort",
}


@dataclass(frozen=True)
class Refusal:
    reason: str
    """CamelCase reason for the Stalled condition."""
    message: str


def trim_timing(spec: TieredTopicSpec) -> TrimTiming:
    """How often the topic is copied, for the retention rule (and the cleanup Jobs' --copy-interval-ms)."""
    return TrimTiming(copy_interval_ms=copy_interval_ms(spec.copy_policy))


def refusals(topic: str, configs: Mapping[str, str], spec: TieredTopicSpec) -> list[Refusal]:
    """Every reason ``topic`` with ``configs`` cannot be tiered as ``spec`` asks; empty when it can."""
    refused = local_trim_refusal(
        topic,
        configs,
        RetentionPolicy(retention_ms=spec.local_retention_ms, retention_bytes=spec.local_retention_bytes),
        trim_timing(spec),
        remote=RetentionPolicy(
            retention_ms=spec.remote_retention_ms, retention_bytes=spec.remote_retention_bytes
        ),
    )
    if refused is None:
        return []
    return [Refusal(_REASONS.get(refused.reason, "NotTierable"), str(refused))]
