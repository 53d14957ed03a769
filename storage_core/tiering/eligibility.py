"""Which topics may be tiered, and which locally trimmed: a pure decision over the configs Kafka reports.

Input is a topic's effective configuration as DescribeConfigs returns it (``KafkaAdmin.topic_configs``):
name -> value, inherited values included. Output is ``None`` (go ahead) or a :class:`Refusal` whose
message is the one line a user sees. Copy (CLI and ``CopyTask``), cleanup's local trim, the operator and
Spark jobs all ask here, so the rules exist once.

Copy refuses
- ``cleanup.policy`` containing ``compact``: the log cleaner rewrites segments after they were copied,
  so the remote copy would keep records Kafka has compacted away, and offsets the two tiers disagree on;
- ``remote.storage.enable=true``: Kafka tiers the topic itself (KIP-405); two tierings of one log would
  disagree on what is remote and what may be deleted locally;
- a topic whose configs lack ``cleanup.policy`` (not what a broker reports): nothing can be proven.

Local trim (cleanup moving the log start with DeleteRecords) additionally refuses a topic whose own
Kafka retention could delete local segments before Tierkeeper has tiered and trimmed them
(:func:`local_trim_refusal`: time, size, and a dimension without a local window). The rules, why they
hold and what they cannot guarantee are stated once, in docs/reliability.md ("The retention rules,
precisely"); this module is their implementation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from storage_core.errors import ConfigError
from storage_core.retention.policy import UNLIMITED, RetentionPolicy

DEFAULT_COPY_INTERVAL_MS = 3_600_000
"""How often copy and cleanup are assumed to run when the caller does not say (one hour)."""
SAFETY_MARGIN_MS = 3_600_000
"""Time on top of the copy interval before Kafka may delete a rolled segment (one more hour)."""
UNTIERED_SEGMENTS = 2
"""Segments of headroom above the local size window: the active one and one waiting to be tiered."""


class RefusalReason(str, Enum):
    COMPACTED = "compacted"
    KAFKA_TIERING = "kafka-tiering"
    CONFIGS_UNKNOWN = "configs-unknown"
    RETENTION_TIME = "retention-time"
    RETENTION_SIZE = "retention-size"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a topic may not be tiered or trimmed; ``str()`` is the one line a user sees."""

    topic: str
    reason: RefusalReason
    detail: str

    def __str__(self) -> str:
        return f"topic {self.topic}: {self.detail}"


class NotTierableError(ConfigError):
    """A topic Tierkeeper refuses to copy or trim; the message names the topic and the reason."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal


@dataclass(frozen=True, slots=True)
class TrimTiming:
    """What the caller knows of its schedule (see the module docstring for how it is used)."""

    copy_interval_ms: int = DEFAULT_COPY_INTERVAL_MS
    safety_margin_ms: int = SAFETY_MARGIN_MS


TIERING_CONFIG_KEYS = frozenset(
    {"cleanup.policy", "remote.storage.enable", "retention.ms", "retention.bytes", "segment.bytes"}
)
"""Every topic config :func:`copy_refusal` and :func:`local_trim_refusal` read: a caller that keeps
configs of many topics (the operator, 10,000 topics) keeps these and drops the ~30 others."""


def config_int(configs: Mapping[str, str], key: str) -> int | None:
    """A topic config as a number; None when it is not set or not a number (Kafka's own default holds)."""
    value = configs.get(key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def copy_refusal(topic: str, configs: Mapping[str, str]) -> Refusal | None:
    """Why ``topic`` must not be copied to the remote tier, or None."""
    policy = configs.get("cleanup.policy")
    if policy is None:
        return Refusal(
            topic,
            RefusalReason.CONFIGS_UNKNOWN,
            "Kafka reported no cleanup.policy for it; refusing to tier what cannot be checked",
        )
    if "compact" in {p.strip().lower() for p in policy.split(",")}:
        return Refusal(
            topic,
            RefusalReason.COMPACTED,
            f"cleanup.policy={policy}: the log cleaner rewrites segments after they are copied; "
            "only cleanup.policy=delete topics can be tiered",
        )
    if configs.get("remote.storage.enable", "false").strip().lower() == "true":
        return Refusal(
            topic,
            RefusalReason.KAFKA_TIERING,
            "remote.storage.enable=true: Kafka's own tiered storage manages this topic; "
            "Tierkeeper does not tier it a second time",
        )
    return None


def compacted_locally(topic: str, in_cleaner_checkpoint: bool) -> Refusal | None:
    """Without Kafka's configs: the log cleaner's checkpoint listing a partition proves compaction."""
    if not in_cleaner_checkpoint:
        return None
    return Refusal(
        topic,
        RefusalReason.COMPACTED,
        "the log dir's cleaner-offset-checkpoint lists it, so Kafka's log cleaner compacts it; "
        "only cleanup.policy=delete topics can be tiered",
    )


def _kafka_limit_refusal(
    topic: str,
    key: str,
    kafka: int | None,
    local: int,
    remote: int | None,
    headroom: int,
    headroom_text: str,
    reason: RefusalReason,
) -> Refusal | None:
    """One dimension (time or size) of :func:`local_trim_refusal`."""
    if kafka is None or kafka == UNLIMITED:
        return None  # Kafka never deletes on this dimension
    if local != UNLIMITED:
        needed = local + headroom
        if kafka >= needed:
            return None
        why = f"it must be >= {needed} (local window {local} + {headroom_text})"
    elif remote == UNLIMITED:
        # No local window on this dimension and an unlimited remote retention: Kafka's retention is what
        # deletes here, and the log start it moves expires the remote copies below it.
        why = "with no local window on it and an unlimited remote retention, it must be -1"
    else:
        # No local window on it: Tierkeeper does not trim by it, so Kafka's retention must both leave the
        # headroom to tier first and keep what the remote retention wants (when the caller knows it).
        needed = max(headroom, remote or 0)
        if kafka >= needed:
            return None
        why = (
            f"it must be >= {needed} ({headroom_text}"
            + (f"; remote retention {remote}" if remote else "")
            + ", no local window on it)"
        )
    return Refusal(
        topic,
        reason,
        f"Kafka's {key}={kafka} may delete segments before they are tiered, trimmed and kept for the "
        f"remote retention; {why}",
    )


def local_trim_refusal(
    topic: str,
    configs: Mapping[str, str],
    local: RetentionPolicy,
    timing: TrimTiming,
    *,
    remote: RetentionPolicy | None,
) -> Refusal | None:
    """Why ``topic`` must not be tiered and locally trimmed with the window ``local``, or None: the one
    rule for Kafka's own retention, used by cleanup's local trim and by the operator's planner (which
    reports it as Stalled). Per dimension (time, size), where Kafka's retention is finite: with a local
    window, Kafka's retention must leave the headroom above it (module docstring); without one (-1),
    Tierkeeper never trims by it, so Kafka's retention must be at least the remote retention (``remote``;
    when unknown, at least the headroom)."""
    refusal = copy_refusal(topic, configs)
    if refusal is not None:
        return refusal
    margin = timing.copy_interval_ms + timing.safety_margin_ms
    by_time = _kafka_limit_refusal(
        topic,
        "retention.ms",
        config_int(configs, "retention.ms"),
        local.retention_ms,
        None if remote is None else remote.retention_ms,
        margin,
        f"copy interval {timing.copy_interval_ms} + margin {timing.safety_margin_ms} ms",
        RefusalReason.RETENTION_TIME,
    )
    if by_time is not None:
        return by_time
    segment = config_int(configs, "segment.bytes") or 0
    return _kafka_limit_refusal(
        topic,
        "retention.bytes",
        config_int(configs, "retention.bytes"),
        local.retention_bytes,
        None if remote is None else remote.retention_bytes,
        UNTIERED_SEGMENTS * segment,
        f"{UNTIERED_SEGMENTS} x segment.bytes {segment}",
        RefusalReason.RETENTION_SIZE,
    )


def kafka_deletion_ceiling(configs: Mapping[str, str], timing: TrimTiming) -> RetentionPolicy:
    """The most local data a trim may leave behind before Kafka's own retention could delete it first: per
    dimension, Kafka's retention less the same headroom :func:`local_trim_refusal` requires (UNLIMITED where
    Kafka never deletes). The trim hold keeps tiered data past the local window for direct readers; if it
    kept more than this, Kafka would delete held segments itself, and a log start Tierkeeper did not set
    expires the remote copies below it (KIP-405's rule): the hold would cost the tier its data."""
    kafka_ms = config_int(configs, "retention.ms")
    kafka_bytes = config_int(configs, "retention.bytes")
    segment = config_int(configs, "segment.bytes") or 0
    margin = timing.copy_interval_ms + timing.safety_margin_ms
    return RetentionPolicy(
        retention_ms=UNLIMITED if kafka_ms is None or kafka_ms < 0 else max(0, kafka_ms - margin),
        retention_bytes=(
            UNLIMITED
            if kafka_bytes is None or kafka_bytes < 0
            else max(0, kafka_bytes - UNTIERED_SEGMENTS * segment)
        ),
    )
