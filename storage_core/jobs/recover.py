"""Recover a deleted topic: observe, plan, (re)create the topic, restore each partition, summarize.

The loop:

1. Observe: the topic's incarnations in the remote tier (manifests rebuilt from markers), the topic in
   Kafka (id, partitions, how many offsets it holds) and any recovery claim naming the live topic.
2. Plan (plan.py): create the topic, reuse an empty or already-claimed one, or refuse.
3. Apply: create the topic (or add partitions), write the claim, then restore partition by partition
   through a transactional producer whose progress commits with its records (restore.py).
4. Summarize: per partition the old range, what was restored now and before, and the old -> new offset
   runs; stored in the remote tier and returned to the CLI.

``--dry-run`` stops after 2 and only reads (committed progress included).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.errors import ConfigError
from storage_core.formats.records import Record
from storage_core.recovery.incarnations import Incarnation, PartitionHistory, choose_source, find_incarnations
from storage_core.recovery.mapping import OffsetRun, concat_runs, is_shifted
from storage_core.recovery.plan import LiveTopic, PlanOptions, TopicPlan, check_target_configs, plan_topic
from storage_core.recovery.restore import ChunkLimits, PartitionStart, restore_partition
from storage_core.recovery.state import (
    Claim,
    Progress,
    RecoveryState,
    read_claim,
    restore_group,
    restore_transactional_id,
)
from storage_core.remote.reader import Isolation, ReadOptions, RemoteReader
from storage_core.remote.store_api import ObjectStore
from storage_core.throttle import RateLimiter

DEFAULT_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's default, below the broker's 1048588
DEFAULT_BATCH_BYTES = 1_000_000  # librdkafka's default batch.size
MIN_BATCH_BYTES = 16_384
DEFAULT_SEGMENT_BYTES = 1 << 30


@dataclass(frozen=True)
class RecoverRequest:
    topic: str
    bootstrap_servers: str
    topic_id: str | None = None
    options: PlanOptions = field(default_factory=PlanOptions)
    topic_config: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    limits: ChunkLimits = field(default_factory=ChunkLimits)
    limiter: RateLimiter | None = None
    """Paces the restore's writes to Kafka (the CLI's ``--max-bytes-per-second``); None: no limit."""


class Reporter(Protocol):
    """Progress display: offsets of one partition at a time."""

    def partition_started(self, partition: int, offsets: int) -> None: ...

    def advance(self, offsets: int) -> None: ...

    def partition_done(self) -> None: ...


@dataclass
class PartitionSummary:
    partition: int
    old_start: int | None
    old_end: int | None
    segments: int
    next_old: int | None = None
    restored_before: int = 0
    restored_now: int = 0
    complete: bool = False
    mapping: list[OffsetRun] | None = field(default_factory=list)
    """Old -> new runs of everything restored so far; None when an earlier run's chunk record is missing."""
    holes: list[tuple[int, int]] = field(default_factory=list)

    @property
    def restored_total(self) -> int:
        return self.restored_before + self.restored_now

    def to_json(self) -> dict[str, Any]:
        runs = self.mapping or []
        return {
            **{k: v for k, v in asdict(self).items() if k != "mapping"},
            "restored_total": self.restored_total,
            "new_start": runs[0].new_start if runs else None,
            "new_end": runs[-1].new_end if runs else None,
            "offsets_shifted": is_shifted(runs),
            "mapping_complete": self.mapping is not None,
            "mapping": [list(r) for r in runs],
        }


@dataclass
class RecoverySummary:
    topic: str
    remote: str
    source_topic_id: str
    target_topic_id: str | None
    action: str
    """create | reuse | resume (what happened, or would happen with --dry-run, to the Kafka topic)."""
    partitions: int
    replication_factor: int | None
    dry_run: bool
    restore: bool
    partition_summaries: list[PartitionSummary]
    warnings: list[str]
    source_description: str

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "remote": self.remote,
            "source_topic_id": self.source_topic_id,
            "target_topic_id": self.target_topic_id,
            "action": self.action,
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "dry_run": self.dry_run,
            "restore": self.restore,
            "source": self.source_description,
            "warnings": self.warnings,
            "restored_now": sum(p.restored_now for p in self.partition_summaries),
            "restored_total": sum(p.restored_total for p in self.partition_summaries),
            "complete": all(p.complete for p in self.partition_summaries),
            "partition_details": [p.to_json() for p in self.partition_summaries],
        }


def recover(
    store: ObjectStore,
    admin: KafkaAdmin,
    request: RecoverRequest,
    reporter: Reporter,
    *,
    run_partitions: RestoreRunner | None = None,
) -> RecoverySummary:
    """Recover ``request.topic``. Partitions are restored one after another in this process, or by
    ``run_partitions`` (e.g. as Spark tasks, one per partition); the result is the same."""
    topic = request.topic
    wanted_type = request.topic_config.get("message.timestamp.type", "CreateTime")
    if request.options.restore and wanted_type != "CreateTime":
        raise ConfigError(
            f"--config message.timestamp.type={wanted_type} would replace the restored records' "
            "timestamps; restore into a CreateTime topic or pass --no-restore"
        )
    incarnations = find_incarnations(store, topic)
    described = admin.describe_if_exists(topic)
    live_id = next(iter(described.values())).topic_id if described else None
    source = choose_source(
        incarnations, topic=topic, topic_id=request.topic_id, live_topic_id=live_id, remote_url=store.url
    )
    live: LiveTopic | None = None
    claims: list[Claim] = []
    if live_id is not None:
        tps = list(described)
        high, low = admin.high_watermarks(tps), admin.log_start_offsets(tps)
        live = LiveTopic(live_id, len(tps), sum(max(0, high[tp] - low[tp]) for tp in tps))
        claims = [c for i in incarnations if (c := read_claim(store, topic, i.topic_id, live_id)) is not None]
    plan = plan_topic(topic, source, live, claims, len(admin.broker_ids()), request.options)
    summary = _summary(request, store, source, plan, live_id)
    summary.warnings.extend(
        f"partition {p}: offsets {a}..{b} are missing from the remote tier"
        for p, h in source.partitions.items()
        for a, b in h.holes()
    )
    if request.dry_run:
        if live_id is not None and plan.resume:
            from storage_core.adapters.kafka_sink import committed_progress

            committed = committed_progress(
                request.bootstrap_servers, restore_group(topic, live_id), topic, source.partitions
            )
            for ps in summary.partition_summaries:
                _apply_progress(ps, source.topic_id, committed.get(ps.partition))
        return summary

    target_id = _prepare_topic(admin, request, plan, live_id, summary.warnings)
    summary.target_topic_id = target_id
    state = RecoveryState(store, topic, source.topic_id, target_id)
    if state.read_claim() is None:
        state.write_claim(
            Claim(
                topic=topic,
                source_topic_id=source.topic_id,
                target_topic_id=target_id,
                partitions=plan.partitions,
                created_at_ms=int(time.time() * 1000),
            )
        )
    if request.options.restore:
        _restore(store, admin, request, source, state, summary, reporter, run_partitions)
    state.write_summary(json.dumps(summary.to_json(), sort_keys=True, default=str).encode())
    return summary


def _summary(
    request: RecoverRequest, store: ObjectStore, source: Incarnation, plan: TopicPlan, live_id: str | None
) -> RecoverySummary:
    action = "create" if plan.create else "resume" if plan.resume else "reuse"
    partitions = [
        PartitionSummary(
            p,
            h.start_offset,
            h.end_offset,
            h.segment_count,
            next_old=h.start_offset,
            complete=h.segment_count == 0,
            holes=h.holes(),
        )
        for p, h in sorted(source.partitions.items())
    ]
    return RecoverySummary(
        request.topic,
        store.url,
        source.topic_id,
        live_id,
        action,
        plan.partitions,
        plan.replication_factor,
        request.dry_run,
        request.options.restore,
        partitions,
        list(plan.warnings),
        source.describe(),
    )


def _prepare_topic(
    admin: KafkaAdmin, request: RecoverRequest, plan: TopicPlan, live_id: str | None, warnings: list[str]
) -> str:
    if plan.create:
        assert plan.replication_factor is not None
        config = {"message.timestamp.type": "CreateTime", **request.topic_config}
        described = admin.create_topic(request.topic, plan.partitions, plan.replication_factor, config)
        return next(iter(described.values())).topic_id
    assert live_id is not None
    if request.topic_config:
        warnings.append(f"topic {request.topic} exists; --config applies only when recover creates it")
    if plan.add_partitions_to is not None:
        admin.create_partitions(request.topic, plan.add_partitions_to)
    return live_id


def _apply_progress(
    ps: PartitionSummary, source_topic_id: str, committed: tuple[int, str | None] | None
) -> Progress | None:
    progress = Progress.decode(committed[1]) if committed else None
    if progress is None:
        return None
    if progress.source != source_topic_id:
        raise ConfigError(
            f"partition {ps.partition} of the target topic holds restore progress of incarnation "
            f"{progress.source}, not {source_topic_id}; refusing to mix histories"
        )
    ps.restored_before = progress.restored
    ps.next_old = progress.next_old
    ps.complete = ps.old_end is None or progress.next_old > ps.old_end
    return progress


@dataclass(frozen=True)
class PartitionRestore:
    """One partition's restore, picklable so it can run as a Spark task: it opens its own producer (one
    transactional id per partition, so a rerun or a retried task fences its predecessor), reader and
    recovery state. One writer per partition, whichever engine runs it."""

    store: Any
    """An ``ObjectStore`` that pickles (``RemoteStore`` pickles as its URL and options)."""
    bootstrap_servers: str
    topic: str
    source_topic_id: str
    target_topic_id: str
    history: PartitionHistory
    summary: PartitionSummary
    limits: ChunkLimits
    message_max_bytes: int
    batch_bytes: int


@dataclass
class RestoreOutcome:
    summary: PartitionSummary
    warnings: list[str] = field(default_factory=list)


RestoreRunner = Callable[[list[PartitionRestore]], list[RestoreOutcome]]
"""Runs partitions' restores elsewhere (e.g. as Spark tasks), results in the given order."""


class _Quiet:
    """The reporter of a restore that runs where nobody watches (a Spark task)."""

    def partition_started(self, partition: int, offsets: int) -> None:
        pass

    def advance(self, offsets: int) -> None:
        pass

    def partition_done(self) -> None:
        pass


def restore_one(
    job: PartitionRestore, limiter: RateLimiter | None = None, reporter: Reporter | None = None
) -> RestoreOutcome:
    """Restore one partition from its committed progress to the end of its tiered history."""
    from storage_core.adapters.kafka_sink import TransactionalSink

    reporter = reporter or _Quiet()
    ps = dataclasses.replace(job.summary)
    out = RestoreOutcome(ps)
    history = job.history
    state = RecoveryState(job.store, job.topic, job.source_topic_id, job.target_topic_id)
    group = restore_group(job.topic, job.target_topic_id)
    # The sink's init_transactions fences a crashed predecessor before the progress is read.
    with (
        TransactionalSink(
            job.bootstrap_servers,
            job.topic,
            group,
            transactional_id=restore_transactional_id(group, ps.partition),
            message_max_bytes=job.message_max_bytes,
            batch_bytes=job.batch_bytes,
        ) as sink,
        RemoteReader(job.store, ReadOptions(isolation=Isolation.READ_COMMITTED)) as reader,
    ):
        committed = sink.committed([ps.partition])
        progress = _apply_progress(ps, job.source_topic_id, committed.get(ps.partition))
        if history.start_offset is None or history.end_offset is None:
            return out
        earlier = state.chain(ps.partition, history.start_offset, progress.next_old) if progress else []
        if progress is not None and progress.next_old < history.start_offset:
            out.warnings.append(
                f"partition {ps.partition}: old offsets {progress.next_old}.."
                f"{history.start_offset - 1} left the remote tier before they were restored"
            )
        start = PartitionStart(
            ps.partition,
            max(ps.next_old or 0, history.start_offset),
            history.end_offset,
            ps.restored_before,
        )
        reporter.partition_started(ps.partition, max(0, history.end_offset + 1 - start.next_old))
        outcome = restore_partition(
            start,
            job.source_topic_id,
            _reader_of(reader, history),
            sink,
            state.write_chunk,
            job.limits,
            limiter,
            reporter.advance,
        )
        reporter.partition_done()
    ps.restored_now = outcome.restored_now
    ps.next_old = outcome.next_old
    ps.complete = True
    ps.mapping = None if earlier is None else concat_runs([*(c.offset_runs() for c in earlier), outcome.runs])
    return out


def _restore(
    store: ObjectStore,
    admin: KafkaAdmin,
    request: RecoverRequest,
    source: Incarnation,
    state: RecoveryState,
    summary: RecoverySummary,
    reporter: Reporter,
    run_partitions: RestoreRunner | None,
) -> None:
    topic = request.topic
    configs = admin.topic_configs(topic)
    summary.warnings.extend(check_target_configs(configs, source.timestamp_range, int(time.time() * 1000)))
    jobs = [
        PartitionRestore(
            store=store,
            bootstrap_servers=request.bootstrap_servers,
            topic=topic,
            source_topic_id=source.topic_id,
            target_topic_id=state.target_topic_id,
            history=source.partitions[ps.partition],
            summary=ps,
            limits=request.limits,
            message_max_bytes=max(DEFAULT_MESSAGE_MAX_BYTES, _int(configs, "max.message.bytes") + 4096),
            batch_bytes=batch_bytes(configs),
        )
        for ps in summary.partition_summaries
    ]
    if run_partitions is None:
        outcomes = [restore_one(job, request.limiter, reporter) for job in jobs]
    else:
        outcomes = run_partitions(jobs)
    summary.partition_summaries = [o.summary for o in outcomes]
    summary.warnings.extend(w for o in outcomes for w in o.warnings)


def _int(configs: dict[str, str], name: str) -> int:
    try:
        return int(configs.get(name) or 0)
    except ValueError:
        return 0


def batch_bytes(configs: dict[str, str]) -> int:
    """Producer batch size for a topic: the broker rejects a batch larger than a segment
    (RECORD_LIST_TOO_LARGE), so batches stay well below the topic's segment size
    (``internal.segment.bytes`` wins when set)."""
    segment = (
        _int(configs, "internal.segment.bytes") or _int(configs, "segment.bytes") or DEFAULT_SEGMENT_BYTES
    )
    return max(MIN_BATCH_BYTES, min(DEFAULT_BATCH_BYTES, segment // 2))


def _reader_of(reader: RemoteReader, history: PartitionHistory) -> Callable[[int], Iterator[Record]]:
    return lambda offset: reader.read_from_offset(history.tp, offset)
