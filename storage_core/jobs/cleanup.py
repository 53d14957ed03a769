"""The cleanup job: remote retention + orphan sweep per remote partition, then the local trim.

Order matters for continuity: the local trim reads the manifest after remote retention ran, and never
trims past the highest COPY_FINISHED offset + 1, so every offset from the remote start to the log end
stays readable from one tier or the other. Consumer groups that read the brokers directly hold the trim
at their committed offsets (``trim_hold``, observed once per topic by ``cleanup_hold``); when their
offsets cannot be read, nothing of the topic is trimmed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from storage_core.api.trim_hold import TrimHold
from storage_core.errors import TierkeeperError
from storage_core.faults import fault_point
from storage_core.jobs.cleanup_hold import TopicHold, observe_hold
from storage_core.reconcile.requests import CleanupRequest
from storage_core.remote.catalog import PartitionCatalog, list_partitions, list_topics
from storage_core.remote.layout import RemoteLayout, SegmentState, TopicPartitionId
from storage_core.remote.store_api import ObjectStore
from storage_core.retention.local_trim import plan_local_trim
from storage_core.retention.policy import UNLIMITED, RetentionPolicy
from storage_core.retention.remote_cleanup import cleanup_partition, delete_partition_tier
from storage_core.retention.trim_hold import HeldTrim, plan_held_trim
from storage_core.tiering.eligibility import (
    Refusal,
    TrimTiming,
    config_int,
    copy_refusal,
    local_trim_refusal,
)


@dataclass
class CleanupOptions:
    topics: set[str] | None = None
    bootstrap_servers: str | None = None
    kafka_config: dict[str, str] = field(default_factory=dict, repr=False)
    """Kafka client properties (may hold SASL credentials: never printed)."""
    log_dirs: tuple[str, ...] = ()
    """A broker's log dirs (all of a JBOD broker's), to count untiered local bytes toward local
    retention.bytes; none: not counted."""
    remote_retention_ms: int | None = None
    remote_retention_bytes: int | None = None
    local_retention_ms: int | None = None
    local_retention_bytes: int | None = None
    orphan_grace_ms: int = 6 * 3600 * 1000
    use_log_start: bool = True
    dry_run: bool = False
    now_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    trim_timing: TrimTiming = field(default_factory=TrimTiming)
    """How often copy and cleanup run: decides which topics' Kafka retention leaves time to trim."""
    trim_hold: TrimHold = field(default_factory=TrimHold)
    """How direct readers' committed offsets hold the local trim."""


def cleanup_options(
    request: CleanupRequest, kafka_config: Mapping[str, str], *, now_ms: int | None = None
) -> CleanupOptions:
    """What the cleanup Job's command makes of ``request``'s arguments, for an in-process run (a test
    proves the two agree). ``kafka_config``: the client properties (the request's plus the Secret's)."""
    return CleanupOptions(
        topics={request.topic},
        bootstrap_servers=request.kafka.bootstrap_servers,
        kafka_config=dict(kafka_config),
        remote_retention_ms=request.remote_retention_ms,
        remote_retention_bytes=request.remote_retention_bytes,
        local_retention_ms=request.local_retention_ms,
        local_retention_bytes=request.local_retention_bytes,
        now_ms=int(time.time() * 1000) if now_ms is None else now_ms,
        trim_timing=TrimTiming(copy_interval_ms=request.copy_interval_ms),
        trim_hold=request.trim_hold,
    )


def run_cleanup_on_spark(
    store: ObjectStore, options: CleanupOptions, master: str | None, conf: Mapping[str, str]
) -> dict[str, Any]:
    """:func:`run_cleanup` with one Spark task per topic-partition (``--engine spark``)."""
    from storage_core.jobs.spark_session import spark_session

    spark = spark_session("tierkeeper-cleanup", master, dict(conf))
    try:

        def on_spark(works: list[PartitionWork]) -> list[tuple[dict[str, Any] | None, str | None]]:
            if not works:
                return []
            return list(spark.sparkContext.parallelize(works, len(works)).map(cleanup_work).collect())

        return run_cleanup(store, options, run_partitions=on_spark)
    finally:
        spark.stop()


@dataclass
class _TopicView:
    """What the broker says about a topic: its current id, retentions and offsets."""

    topic_id: str | None = None
    remote: RetentionPolicy = field(default_factory=RetentionPolicy)
    local: RetentionPolicy | None = None
    log_start: dict[int, int] = field(default_factory=dict)
    refusal: Refusal | None = None
    """Why Tierkeeper must leave this topic alone (tiering.eligibility); the cleanup skips it."""
    hold: TopicHold | None = None
    """Which consumer groups hold the local trim (None: the hold is off, or there is no trim to hold)."""


def _policies(
    options: CleanupOptions, configs: dict[str, str]
) -> tuple[RetentionPolicy, RetentionPolicy | None]:
    remote = RetentionPolicy(
        retention_ms=_pick(options.remote_retention_ms, config_int(configs, "retention.ms")),
        retention_bytes=_pick(options.remote_retention_bytes, config_int(configs, "retention.bytes")),
    )
    local_ms = _pick(options.local_retention_ms, _local(config_int(configs, "local.retention.ms")))
    local_bytes = _pick(options.local_retention_bytes, _local(config_int(configs, "local.retention.bytes")))
    local = (
        None
        if local_ms == UNLIMITED and local_bytes == UNLIMITED
        else RetentionPolicy(retention_ms=local_ms, retention_bytes=local_bytes)
    )
    return remote, local


def _pick(flag: int | None, config: int | None) -> int:
    value = flag if flag is not None else config
    return UNLIMITED if value is None or value < 0 else value


def _local(value: int | None) -> int | None:
    # Kafka's -2 means "same as retention": no separate local window, so no trim from us.
    return None if value is None or value == -2 else value


@dataclass(frozen=True)
class PartitionWork:
    """One partition's cleanup, picklable so it can run as a Spark task (the store pickles as its URL and
    options; a task opens its own Kafka admin client)."""

    store: Any
    tp: TopicPartitionId
    view: _TopicView
    options: CleanupOptions


def cleanup_work(work: PartitionWork) -> tuple[dict[str, Any] | None, str | None]:
    """Run one partition's cleanup in a task: (its report, None) or (None, the error line)."""
    admin = None
    if work.options.bootstrap_servers:
        from storage_core.adapters.kafka_admin import KafkaAdmin

        admin = KafkaAdmin(work.options.bootstrap_servers, work.options.kafka_config)
    try:
        layout = RemoteLayout(work.store.root)
        return _cleanup_one(work.store, layout, work.tp, work.view, admin, work.options), None
    except TierkeeperError as exc:
        return None, f"{work.tp}: {exc}"


PartitionRunner = Callable[[list[PartitionWork]], list[tuple[dict[str, Any] | None, str | None]]]
"""Runs partitions' cleanups elsewhere (e.g. as Spark tasks), results in the given order."""


def run_cleanup(
    store: ObjectStore, options: CleanupOptions, *, run_partitions: PartitionRunner | None = None
) -> dict[str, Any]:
    """Clean up every remote partition (of ``options.topics``). By default partition by partition in this
    process; ``run_partitions`` runs them elsewhere, one task per partition."""
    layout = RemoteLayout(store.root)
    admin = positions = None
    if options.bootstrap_servers:
        from storage_core.adapters.kafka_admin import KafkaAdmin
        from storage_core.adapters.kafka_groups import GroupPositions

        admin = KafkaAdmin(options.bootstrap_servers, options.kafka_config)
        positions = GroupPositions(admin) if options.trim_hold.enabled else None
    report: dict[str, Any] = {
        "dry_run": options.dry_run,
        "partitions": [],
        "errors": [],
        "bytes_deleted": 0,
        "stale_uploads_aborted": [],
        "refused": [],
    }
    views: dict[str, _TopicView] = {}
    for topic, topic_id in list_topics(store, layout):
        if options.topics is not None and topic not in options.topics:
            continue
        view = views.get(topic)
        if view is None:
            view = views[topic] = _view(admin, topic, options, report)
            if view.refusal is not None:
                report["errors"].append(str(view.refusal))
                report["refused"].append({"topic": topic, "reason": view.refusal.reason.value})
        if view.refusal is not None:
            continue
        current = topic_id == view.topic_id
        if positions is not None and current and view.hold is None and view.local is not None:
            view.hold = observe_hold(
                positions,
                store,
                layout,
                topic,
                topic_id,
                view.log_start,
                options.trim_hold,
                now_ms=options.now_ms,
                dry_run=options.dry_run,
            )
            if view.hold.unknown is not None:
                report["errors"].append(f"{topic}: trim held: {view.hold.unknown}")
        tps = list_partitions(store, layout, topic, topic_id)
        if run_partitions is not None:
            for done, error in run_partitions([PartitionWork(store, tp, view, options) for tp in tps]):
                if done is not None:
                    report["partitions"].append(done)
                if error is not None:
                    report["errors"].append(error)
        for tp in tps if run_partitions is None else []:
            try:
                report["partitions"].append(_cleanup_one(store, layout, tp, view, admin, options))
            except TierkeeperError as exc:
                report["errors"].append(f"{tp}: {exc}")
        try:
            # Part of the orphan sweep: a copy killed mid-upload leaves parts no listing shows.
            report["stale_uploads_aborted"] += store.abort_stale_uploads(
                layout.topic_dir(topic, topic_id),
                options.now_ms - options.orphan_grace_ms,
                dry_run=options.dry_run,
            )
        except TierkeeperError as exc:
            report["errors"].append(f"{topic}: {exc}")
    report["bytes_deleted"] = sum(p["bytes_deleted"] for p in report["partitions"])
    return report


def _view(admin: Any, topic: str, options: CleanupOptions, report: dict[str, Any]) -> _TopicView:
    view = _TopicView()
    configs: dict[str, str] = {}
    if admin is not None:
        described = admin.describe_if_exists(topic)
        if described:
            view.topic_id = next(iter(described.values())).topic_id
            configs = admin.topic_configs(topic)
            view.log_start = {p: o for (_, p), o in admin.log_start_offsets(list(described)).items()}
    view.remote, view.local = _policies(options, configs)
    if configs:
        # Checked only where Kafka still has the topic: a deleted topic's tier is only expired.
        view.refusal = (
            copy_refusal(topic, configs)
            if view.local is None
            else local_trim_refusal(topic, configs, view.local, options.trim_timing, remote=view.remote)
        )
    return view


def _cleanup_one(
    store: ObjectStore,
    layout: RemoteLayout,
    tp: TopicPartitionId,
    view: _TopicView,
    admin: Any,
    options: CleanupOptions,
) -> dict[str, Any]:
    catalog = PartitionCatalog(store, layout, tp)
    current = view.topic_id == tp.topic_id
    state = catalog.read_state()
    log_start = view.log_start.get(tp.partition) if current else None
    # A log start Tierkeeper did not set (Kafka's own retention or a user's DeleteRecords) deletes the
    # remote copies below it too, as KIP-405 does; one we set by trimming locally never does.
    logical_start = None
    if (
        options.use_log_start
        and log_start is not None
        and (state.local_trim_offset is None or log_start > state.local_trim_offset)
    ):
        logical_start = log_start
    result = cleanup_partition(
        catalog,
        view.remote,
        now_ms=options.now_ms,
        log_start_offset=logical_start,
        orphan_grace_ms=options.orphan_grace_ms,
        dry_run=options.dry_run,
    )
    out: dict[str, Any] = dataclasses.asdict(result)
    out["topic_id"] = tp.topic_id
    if admin is not None and current and view.local is not None and log_start is not None:
        if view.hold is not None and view.hold.unknown is not None:
            out["trim_hold"] = {"unknown": view.hold.unknown}  # the previous trim point stays
        else:
            out["local_trim"], held = _trim(catalog, admin, tp, log_start, view.local, view.hold, options)
            if held is not None:
                out["trim_hold"] = held
    return out


def _trim(
    catalog: PartitionCatalog,
    admin: Any,
    tp: TopicPartitionId,
    log_start: int,
    policy: RetentionPolicy,
    hold: TopicHold | None,
    options: CleanupOptions,
) -> tuple[dict[str, int | None] | None, dict[str, Any] | None]:
    """(the local trim's report entry, the trim hold's: None when the hold is off)."""
    no_hold = None if hold is None else HeldTrim(None, None).report()
    listing = catalog.listing()
    manifest = catalog.rebuild_manifest(listing, write=not options.dry_run)
    # Read after remote retention ran: what it expired leaves the broker even when the tier is now empty.
    expired = catalog.read_state().retention_expired_offset
    tiered_next = manifest.next_offset if manifest.next_offset is not None else expired
    if tiered_next is None:
        return None, no_hold
    untiered = _untiered_local_bytes(options.log_dirs, tp, tiered_next)
    quarantined = [
        catalog.read_marker(e.base_offset, e.segment_id, SegmentState.QUARANTINED)
        for e in listing.segments.values()
        if e.state is SegmentState.QUARANTINED
    ]
    target = plan_local_trim(
        manifest.segments,
        log_start,
        policy,
        options.now_ms,
        untiered_local_bytes=untiered,
        quarantined=quarantined,
        expired_offset=expired,
    )
    held = None
    if hold is not None:
        plan = plan_held_trim(
            target,
            log_start,
            manifest.segments,
            hold.on(tp.partition),
            options.trim_hold,
            options.now_ms,
            quarantined=quarantined,
            expired_offset=expired,
        )
        target, held = plan.to, plan.report()
    if target is None:
        return None, held
    trim: dict[str, int | None] = {"from": log_start, "to": target, "tiered_end": manifest.end_offset}
    if expired is not None:
        trim["expired_remotely"] = expired
    if not options.dry_run:
        # Recorded before the call, so a log start we caused is never mistaken for a deletion request.
        state = catalog.read_state()
        catalog.write_state(
            state.model_copy(update={"local_trim_offset": max(target, state.local_trim_offset or 0)})
        )
        fault_point("cleanup.trim.recorded")
        reported = admin.delete_records({(tp.topic, tp.partition): target})
        trim["to"] = reported.get((tp.topic, tp.partition), target)
    return trim, held


def _untiered_local_bytes(log_dirs: tuple[str, ...], tp: TopicPartitionId, tiered_next: int) -> int:
    if not log_dirs:
        return 0
    from storage_core.logdir import LogDirs

    for pdir in LogDirs(log_dirs).partitions({tp.topic}):
        if pdir.tp == tp.topic_partition:
            return sum(s.log_size for s in pdir.segments() if s.base_offset >= tiered_next)
    return 0


def delete_topic(
    store: ObjectStore, topic: str, *, topic_id: str | None = None, dry_run: bool = False
) -> dict[str, Any]:
    """Remove every remote object of ``topic`` (one incarnation with ``topic_id``)."""
    layout = RemoteLayout(store.root)
    report: dict[str, Any] = {"dry_run": dry_run, "deleted_topics": [], "bytes_deleted": 0, "errors": []}
    incarnations = [(t, i) for t, i in list_topics(store, layout) if t == topic and topic_id in (None, i)]
    if not incarnations:
        report["errors"].append(f"topic {topic} is not in the remote tier {store.url}")
    for name, tid in incarnations:
        total = 0
        for tp in list_partitions(store, layout, name, tid):
            catalog = PartitionCatalog(store, layout, tp)
            if dry_run:
                total += sum(sum(e.objects.values()) for e in catalog.listing().segments.values())
            else:
                total += delete_partition_tier(catalog)
        # Uploads still open under the topic would outlive its objects, invisible but billed.
        aborted = store.abort_stale_uploads(
            layout.topic_dir(name, tid), int(time.time() * 1000) + 1, dry_run=dry_run
        )
        if not dry_run:
            store.delete_tree(layout.topic_dir(name, tid))
        report["deleted_topics"].append(
            {"topic": name, "topic_id": tid, "bytes": total, "uploads_aborted": aborted}
        )
        report["bytes_deleted"] += total
    return report
