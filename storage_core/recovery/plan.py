"""Recovery decisions: what to do with the Kafka topic, given what the remote tier and Kafka hold.

Pure functions over observations; they return a plan or raise ``ConfigError`` with the one line a user
needs. The rule they keep: a topic's history is never mixed with another's. A live topic is restored
into only when it is empty, or is already this incarnation's recovery target (a rerun), or the user
says so explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from storage_core.errors import ConfigError
from storage_core.recovery.incarnations import Incarnation
from storage_core.recovery.state import Claim

MAX_DEFAULT_REPLICATION = 3


@dataclass(frozen=True)
class LiveTopic:
    """The topic as it exists in Kafka now."""

    topic_id: str
    partitions: int
    records: int
    """Offsets between each partition's log start and high watermark, summed (0 = empty)."""


@dataclass(frozen=True)
class PlanOptions:
    replication_factor: int | None = None
    partitions: int | None = None
    partitions_from_remote: bool = False
    allow_non_empty: bool = False
    restore: bool = True


@dataclass
class TopicPlan:
    """What happens to the Kafka topic before history is restored into it."""

    create: bool
    partitions: int
    replication_factor: int | None
    add_partitions_to: int | None = None
    resume: bool = False
    warnings: list[str] = field(default_factory=list)


def plan_topic(
    topic: str,
    source: Incarnation,
    live: LiveTopic | None,
    claims: list[Claim],
    brokers: int,
    options: PlanOptions,
) -> TopicPlan:
    """Decide how to (re)create ``topic`` for ``source``; ``claims`` name the live topic as a target."""
    remote_count = source.partition_count
    warnings: list[str] = []
    if options.partitions is not None and options.partitions < remote_count:
        raise ConfigError(
            f"--partitions {options.partitions} is below the {remote_count} partitions of "
            f"incarnation {source.topic_id} in the remote tier"
        )
    wanted = options.partitions if options.partitions is not None else remote_count
    if live is None:
        rf = options.replication_factor or min(MAX_DEFAULT_REPLICATION, brokers)
        if rf < 1 or rf > brokers:
            raise ConfigError(f"replication factor {rf} does not fit a cluster of {brokers} brokers")
        if options.partitions is None:
            warnings.append(
                f"partition count {remote_count} taken from the remote tier (a trailing partition "
                "that never tiered a segment is invisible there; use --partitions to override)"
            )
        return TopicPlan(create=True, partitions=wanted, replication_factor=rf, warnings=warnings)

    if live.topic_id == source.topic_id:
        raise ConfigError(
            f"topic {topic} with id {source.topic_id} still exists in Kafka; nothing to recover"
        )
    own = [c for c in claims if c.source_topic_id == source.topic_id]
    foreign = [c for c in claims if c.source_topic_id != source.topic_id]
    if foreign:
        raise ConfigError(
            f"topic {topic} (id {live.topic_id}) already holds the recovered history of incarnation "
            f"{foreign[0].source_topic_id}; refusing to mix in {source.topic_id}"
        )
    if not own and live.records > 0 and options.restore and not options.allow_non_empty:
        raise ConfigError(
            f"topic {topic} exists in Kafka with another topic id ({live.topic_id}) and holds "
            f"{live.records} offsets; refusing to mix histories (delete it, or pass "
            "--allow-non-empty to append the recovered history after its data)"
        )
    if options.replication_factor is not None:
        warnings.append(f"topic {topic} exists; --replication-factor {options.replication_factor} is ignored")
    add_to = None
    if live.partitions < wanted:
        if not (options.partitions_from_remote or options.partitions is not None):
            raise ConfigError(
                f"topic {topic} has {live.partitions} partitions but incarnation {source.topic_id} "
                f"has {remote_count}; pass --partitions-from-remote to add the missing ones"
            )
        add_to = wanted
    return TopicPlan(
        create=False,
        partitions=max(live.partitions, wanted),
        replication_factor=None,
        add_partitions_to=add_to,
        resume=bool(own),
        warnings=warnings,
    )


def check_target_configs(
    configs: dict[str, str], timestamps: tuple[int, int] | None, now_ms: int
) -> list[str]:
    """Problems restoring into a topic with ``configs``; raises for the ones that would lose data.

    Returns warnings (retention that will delete restored records by their original timestamps).
    """
    if configs.get("message.timestamp.type", "CreateTime") != "CreateTime":
        raise ConfigError(
            "the target topic uses message.timestamp.type="
            f"{configs['message.timestamp.type']}, so restored records would lose their timestamps; "
            "set it to CreateTime or pass --no-restore"
        )
    if timestamps is None:
        return []
    oldest, newest = timestamps
    before = _int(configs.get("message.timestamp.before.max.ms"))
    if before is not None and oldest < now_ms - before:
        raise ConfigError(
            f"the target topic's message.timestamp.before.max.ms={before} rejects the oldest "
            f"tiered timestamp ({oldest}); raise it for the restore or pass --no-restore"
        )
    after = _int(configs.get("message.timestamp.after.max.ms"))
    if after is not None and newest > now_ms + after:
        raise ConfigError(
            f"the target topic's message.timestamp.after.max.ms={after} rejects the newest "
            f"tiered timestamp ({newest}); raise it for the restore or pass --no-restore"
        )
    retention = _int(configs.get("retention.ms"))
    if retention is not None and retention >= 0 and oldest < now_ms - retention:
        return [
            f"retention.ms={retention} of the target topic will delete restored records older than "
            f"{now_ms - retention} soon after they are written; they stay readable from the old incarnation "
            "in the remote tier (set --config retention.ms=-1 to keep them in Kafka)"
        ]
    return []


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
