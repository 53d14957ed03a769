"""One rebuild run: find where the log dir stands, plan, restore into staging, install.

What Kafka says (assignment, offsets, topic configs) comes in as plain data from the entry point, so
this module never talks to Kafka itself; the remote tier is read through the ObjectStore protocol.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from storage_core.faults import fault_point
from storage_core.formats.segment_files import TopicPartition
from storage_core.rebuild.plan import (
    AssignedPartition,
    PartitionObservation,
    PartitionPlan,
    RebuildPlan,
    RebuildRefused,
    plan_rebuild,
    resolve_policy,
)
from storage_core.rebuild.restore import NO_PROGRESS, RestoreProgress, RestoreResult, restore
from storage_core.rebuild.state import (
    PartitionSummary,
    RebuildDir,
    Situation,
    classify,
    now_ms,
)
from storage_core.reconcile.rebuild import RebuildResult
from storage_core.remote.catalog import PartitionCatalog, list_topics
from storage_core.remote.layout import RemoteLayout, TopicPartitionId
from storage_core.remote.store_api import ObjectStore


@dataclass(frozen=True)
class RebuildOptions:
    broker_id: int
    parallelism: int = 4
    dry_run: bool = False
    local_retention_ms: int | None = None
    local_retention_bytes: int | None = None
    if_empty: bool = False
    """The init container's mode: a log dir holding data is left alone (action ``skipped``) instead of
    refused, and a missing or unformatted (no ``meta.properties``) empty dir is restored too."""


@dataclass
class RebuildOutcome:
    action: str
    """``rebuilt``, ``resumed``, ``installed`` (a crash after the restore was finished), ``already-rebuilt``,
    ``nothing-to-restore``, ``dry-run`` or (``if_empty``) ``skipped``."""
    log_dir: str
    partitions: list[PartitionSummary]
    restore: RestoreResult = field(default_factory=RestoreResult)
    reason: str = ""
    """Why nothing was done (``skipped``)."""

    @property
    def planned_bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    def result(self) -> RebuildResult:
        """The run as ``status.rebuild`` records it (init container, rebuild Job, standalone mode)."""
        return RebuildResult(
            action=self.action,
            reason=self.reason,
            partitions_restored=len([p for p in self.partitions if p.segments]),
            bytes_restored=self.planned_bytes,
            expected_tail=sum(p.expected_tail for p in self.partitions),
        )


ClusterView = Callable[[], Sequence[AssignedPartition]]


def observe(
    store: ObjectStore, assigned: Sequence[AssignedPartition], options: RebuildOptions
) -> list[PartitionObservation]:
    """Join Kafka's view with the remote tier's manifests (listed in parallel: one LIST per partition)."""
    layout = RemoteLayout(store.root)
    ids: dict[str, list[str]] = {}
    for topic, topic_id in list_topics(store, layout):
        ids.setdefault(topic, []).append(topic_id)
    mine = [a for a in assigned if options.broker_id in a.replicas]

    def one(a: AssignedPartition) -> PartitionObservation:
        manifest = None
        if a.topic_id in ids.get(a.topic, []):
            catalog = PartitionCatalog(store, layout, TopicPartitionId(a.topic, a.topic_id, a.partition))
            # Derived from the markers, never trusted stale, and not written back: a dry run writes nothing.
            manifest = catalog.rebuild_manifest(write=False, strict=True)
        policy = resolve_policy(
            a.topic_config,
            retention_ms=options.local_retention_ms,
            retention_bytes=options.local_retention_bytes,
        )
        kafka_view = {f.name: getattr(a, f.name) for f in fields(AssignedPartition)}
        return PartitionObservation(
            **kafka_view, policy=policy, remote_topic_ids=tuple(ids.get(a.topic, [])), manifest=manifest
        )

    with ThreadPoolExecutor(max_workers=max(1, options.parallelism)) as pool:
        return list(pool.map(one, mine))


def summarize(plan: PartitionPlan) -> PartitionSummary:
    restored = plan.restored or (None, None)
    return PartitionSummary(
        topic=plan.topic,
        partition=plan.partition,
        topic_id=plan.topic_id,
        segments=len(plan.segments),
        bytes=plan.bytes,
        restored_start=restored[0],
        restored_end=restored[1],
        leader_end=plan.leader_end,
        expected_tail=plan.expected_tail,
        note=plan.note,
    )


def make_plan(store: ObjectStore, cluster: ClusterView, options: RebuildOptions) -> RebuildPlan:
    plan = plan_rebuild(
        options.broker_id, observe(store, cluster(), options), RemoteLayout(store.root), now_ms()
    )
    if plan.refusals:
        more = f" (and {len(plan.refusals) - 1} more)" if len(plan.refusals) > 1 else ""
        raise RebuildRefused(plan.refusals[0] + more)
    return plan


def rebuild_log_dir(
    log_dir: str | Path,
    store: ObjectStore,
    cluster: ClusterView,
    options: RebuildOptions,
    progress: RestoreProgress = NO_PROGRESS,
) -> RebuildOutcome:
    """Run (or resume, or confirm) the rebuild of one log dir; raises TierkeeperError on refusal/failure."""
    if options.if_empty:
        skip = if_empty_skip(Path(log_dir), options)
        if skip is not None:
            return RebuildOutcome("skipped", str(log_dir), [], reason=skip)
    rdir = RebuildDir(log_dir)
    situation = classify(rdir.observe(), rdir.path, unformatted_ok=options.if_empty)
    rdir.check_identity(options.broker_id)
    if situation is Situation.FRESH:
        rdir.check_fresh(set())  # the cheap refusals first, before anything is touched
    if situation is Situation.COMPLETE:
        marker = rdir.read_marker()
        return RebuildOutcome("already-rebuilt", str(rdir.path), marker.partitions if marker else [])
    if options.dry_run:
        if rdir.is_locked_by_other():
            raise RebuildRefused(f"{rdir.path} is locked: a broker is using this log dir")
        if situation is Situation.INSTALLING:
            marker = rdir.read_marker()
            return RebuildOutcome("dry-run", str(rdir.path), marker.partitions if marker else [])
        plan = make_plan(store, cluster, options)
        if situation is Situation.FRESH:
            rdir.check_fresh(_tps(plan))
        return RebuildOutcome("dry-run", str(rdir.path), [summarize(p) for p in plan.partitions])

    with rdir.locked():
        # Re-read under the lock: another run may have moved the dir on meanwhile.
        situation = classify(rdir.observe(), rdir.path, unformatted_ok=options.if_empty)
        marker = rdir.read_marker()
        if situation is Situation.COMPLETE:
            return RebuildOutcome("already-rebuilt", str(rdir.path), marker.partitions if marker else [])
        if situation is Situation.INSTALLING and marker is not None:
            done = rdir.install(marker)
            return RebuildOutcome("installed", str(rdir.path), done.partitions)
        plan = make_plan(store, cluster, options)
        if situation is Situation.FRESH:
            rdir.check_fresh(_tps(plan))
            if not plan.restoring:
                return RebuildOutcome(
                    "nothing-to-restore", str(rdir.path), [summarize(p) for p in plan.partitions]
                )
        rdir.arm_guards(options.broker_id)
        rdir.prune_staging({p.dir_name for p in plan.restoring})
        result = restore(
            plan.restoring,
            rdir.partition_dir,
            store,
            parallelism=options.parallelism,
            progress=progress,
        )
        summaries = [summarize(p) for p in plan.partitions]
        installing = rdir.mark_installing(summaries)
        fault_point("rebuild.installing")
        done = rdir.install(installing)
        action = "rebuilt" if situation is Situation.FRESH else "resumed"
        return RebuildOutcome(action, str(rdir.path), done.partitions, result)


_ACTION_RANK = (
    "rebuilt",
    "resumed",
    "installed",
    "dry-run",
    "already-rebuilt",
    "nothing-to-restore",
    "skipped",
)


def dir_index(topic: str, partition: int, dirs: int) -> int:
    """Which of a JBOD broker's ``dirs`` log dirs a rebuild puts a partition into: from the partition
    alone, so a run resumed after a crash (or with partitions added meanwhile) puts every partition where
    the first run did. A topic's partitions go round the dirs from a place its name's hash picks, so each
    topic is spread evenly and the topics do not all start in the first dir."""
    return (zlib.crc32(topic.encode()) + partition) % dirs


def rebuild_log_dirs(
    log_dirs: Sequence[str | Path],
    store: ObjectStore,
    cluster: ClusterView,
    options: RebuildOptions,
    progress: RestoreProgress = NO_PROGRESS,
) -> RebuildOutcome:
    """Rebuild every log dir of a broker (JBOD: several). Each partition goes into one dir
    (:func:`dir_index`) and each dir is rebuilt on its own, with its own lock, marker and resume.

    Only a broker whose dirs are all empty is rebuilt: with one replaced disk among others holding data,
    a restored partition could land beside its live copy in another dir (Kafka refuses to start then),
    so ``if_empty`` skips and otherwise the non-empty dir is refused, before any dir is touched."""
    if len(log_dirs) == 1:
        return rebuild_log_dir(log_dirs[0], store, cluster, options, progress)
    paths = [Path(d) for d in log_dirs]
    if len(set(paths)) != len(paths):
        raise RebuildRefused(f"a log dir is named twice: {', '.join(map(str, paths))}")
    if options.if_empty:
        for path in paths:
            skip = if_empty_skip(path, options)
            if skip is not None:
                return RebuildOutcome(
                    "skipped",
                    ", ".join(map(str, paths)),
                    [],
                    reason=f"{skip} (a broker with several log dirs is rebuilt only when all are empty)",
                )
    for path in paths:
        rdir = RebuildDir(path)
        if classify(rdir.observe(), rdir.path, unformatted_ok=options.if_empty) is Situation.FRESH:
            rdir.check_fresh(set())
    outcomes = []
    for i, path in enumerate(paths):

        def share(i: int = i) -> list[AssignedPartition]:
            return [a for a in cluster() if dir_index(a.topic, a.partition, len(paths)) == i]

        outcomes.append(rebuild_log_dir(path, store, share, options, progress))
    actions = {o.action for o in outcomes}
    action = next(a for a in _ACTION_RANK if a in actions) if len(actions) > 1 else actions.pop()
    total = RestoreResult()
    for o in outcomes:
        for f in fields(RestoreResult):
            setattr(total, f.name, getattr(total, f.name) + getattr(o.restore, f.name))
    return RebuildOutcome(
        action,
        ", ".join(o.log_dir for o in outcomes),
        sorted((p for o in outcomes for p in o.partitions), key=lambda p: (p.topic, p.partition)),
        total,
    )


def assigned_partitions(admin: Any, broker_id: int, excluded: set[str]) -> list[AssignedPartition]:
    """What Kafka says of every partition assigned to ``broker_id``, through ``admin`` (the Kafka Admin
    adapter, passed in): replicas, leader, the leader's offsets and the topic's configs."""
    described = admin.describe([t for t in admin.topic_names() if t not in excluded])
    mine = [info for info in described.values() if broker_id in info.replicas]
    tps = [(i.topic, i.partition) for i in mine]
    starts, ends = admin.log_start_offsets(tps), admin.high_watermarks(tps)
    configs = {topic: admin.topic_configs(topic) for topic in sorted({i.topic for i in mine})}
    return [
        AssignedPartition(
            i.topic,
            i.partition,
            i.topic_id,
            i.leader,
            i.replicas,
            starts[(i.topic, i.partition)],
            ends[(i.topic, i.partition)],
            configs[i.topic],
        )
        for i in mine
    ]


def if_empty_skip(path: Path, options: RebuildOptions) -> str | None:
    """Why ``--if-empty`` leaves this log dir alone, or None when it is (or may become) a rebuild.

    Cheap and without Kafka or the remote tier: this runs at every start of the broker's pod. A rebuild
    marker or guard always means "continue" (a half-restored dir is completed, never started as whole)."""
    if not path.exists():
        if not path.parent.is_dir() or options.dry_run:
            return None  # RebuildDir reports the missing dir (or volume) as an error
        path.mkdir()  # a fresh volume: the broker's own format would create the dir the same way
    if not path.is_dir():
        return None
    rdir = RebuildDir(path)
    seen = rdir.observe()
    if seen.marker is not None or seen.staging or seen.aside:
        return None
    unexpected = rdir.unexpected_entries()
    if unexpected:
        shown = ", ".join(unexpected[:3]) + (", ..." if len(unexpected) > 3 else "")
        return f"log dir {path} holds data ({shown}); nothing to restore"
    if rdir.is_locked_by_other():
        return f"log dir {path} is locked by a running broker; nothing to restore"
    return None


def _tps(plan: RebuildPlan) -> set[TopicPartition]:
    return {TopicPartition(p.topic, p.partition) for p in plan.restoring}
