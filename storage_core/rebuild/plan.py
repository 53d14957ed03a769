"""What a rebuild restores for each partition: a pure function of what Kafka and the remote tier say.

Per partition assigned to the broker, the restored data is a run of COPY_FINISHED remote segments that
1. lies entirely below the leader's high watermark (committed data the leader still has),
2. is contiguous (each base offset is the previous segment's next offset) and ends at the newest
   such segment, so the follower's log is an exact prefix of the leader's. Only serving segments count
   (storage_core/remote/cover.py), restored whole: where two stored segments overlap (a leader change),
   the chain starts at the later one, because Kafka refuses a log dir with overlapping segments and a
   restored segment stays byte-identical to the tiered one (the older offsets stay readable remotely),
3. starts inside the local retention window and not before the leader's log start offset (Kafka would
   delete anything older as soon as the follower fetches).

Besides the segments (.log, .index, .timeindex), the partition gets ``partition.metadata``, a leader
epoch checkpoint derived from the last restored segment's metadata, and the producer snapshot taken
where the restored data starts. That snapshot is the one Kafka's recovery loads: recovering from the
first restored segment deletes every snapshot above it (see docs/rebuild.md), so the producer state of
producers older than the window survives only through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from storage_core.errors import TierkeeperError
from storage_core.formats.checkpoints import EpochEntry
from storage_core.formats.segment_files import SegmentFileKind, TopicPartition, segment_file_name
from storage_core.remote.layout import RemoteLayout, SegmentObject
from storage_core.remote.metadata import Manifest, SegmentMetadata
from storage_core.retention.policy import UNLIMITED, RetentionPolicy, SegmentSummary, window_start

LOCAL_RETENTION_MS = "local.retention.ms"
LOCAL_RETENTION_BYTES = "local.retention.bytes"

_SEGMENT_FILES = (
    (SegmentObject.LOG, SegmentFileKind.LOG),
    (SegmentObject.OFFSET_INDEX, SegmentFileKind.INDEX),
    (SegmentObject.TIME_INDEX, SegmentFileKind.TIME_INDEX),
)


class RebuildRefused(TierkeeperError):
    """The rebuild cannot proceed safely; the message says which partition and why."""


@dataclass(frozen=True, slots=True)
class AssignedPartition:
    """A partition as Kafka describes it, with the leader's offsets and the topic's config."""

    topic: str
    partition: int
    topic_id: str
    """Kafka's topic id (22-character base64url)."""
    leader: int | None
    replicas: tuple[int, ...]
    log_start_offset: int
    """The leader's log start offset (ListOffsets earliest)."""
    high_watermark: int
    """The leader's high watermark (ListOffsets latest): the end a caught-up follower reaches."""
    topic_config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionObservation(AssignedPartition):
    """Everything the planner needs about one partition assigned to the broker being rebuilt: Kafka's view
    joined with the remote tier's."""

    policy: RetentionPolicy
    remote_topic_ids: tuple[str, ...]
    """Topic ids under which the remote tier holds a topic of this name."""
    manifest: Manifest | None
    """The remote manifest under Kafka's topic id, or None when nothing is tiered under it."""


@dataclass(frozen=True, slots=True)
class RestoreFile:
    """One file to download into the partition directory."""

    name: str
    key: str
    size: int
    crc32c: int | None
    batch_chain_crc32c: int | None = None
    """For ``.log`` objects tiered since the batch chain replaced the whole-object CRC (see StoredObject)."""


@dataclass(frozen=True)
class PartitionPlan:
    topic: str
    partition: int
    topic_id: str
    leader: int | None
    leader_start: int
    leader_end: int
    window_start: int | None
    """First offset inside the local retention window (None: the window holds everything tiered)."""
    segments: tuple[SegmentMetadata, ...] = ()
    files: tuple[RestoreFile, ...] = ()
    leader_epochs: tuple[EpochEntry, ...] = ()
    note: str = ""

    @property
    def dir_name(self) -> str:
        return str(TopicPartition(self.topic, self.partition))

    @property
    def restores(self) -> bool:
        return bool(self.segments)

    @property
    def restored(self) -> tuple[int, int] | None:
        """The offsets restored, ``[first, end)``: ``end`` is the follower's log end offset after the
        restore. None when nothing is restored."""
        return (self.segments[0].base_offset, self.segments[-1].next_offset) if self.segments else None

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def expected_tail(self) -> int:
        """Offsets the broker still replicates from the leader once it starts."""
        start = self.restored[1] if self.restored else self.leader_start
        return max(0, self.leader_end - start)


@dataclass
class RebuildPlan:
    broker_id: int
    partitions: list[PartitionPlan] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)

    @property
    def restoring(self) -> list[PartitionPlan]:
        return [p for p in self.partitions if p.restores]


def resolve_policy(
    topic_config: Mapping[str, str], *, retention_ms: int | None, retention_bytes: int | None
) -> RetentionPolicy:
    """The local window for one topic: a flag wins, then the topic's ``local.retention.*`` when it holds a
    real limit (>= 0; Kafka's -2 means "same as retention.*", i.e. the whole log), else unlimited."""

    def pick(flag: int | None, name: str) -> int:
        if flag is not None:
            return flag
        try:
            value = int(topic_config.get(name, str(UNLIMITED)))
        except ValueError:
            return UNLIMITED
        return value if value >= 0 else UNLIMITED

    return RetentionPolicy(
        retention_ms=pick(retention_ms, LOCAL_RETENTION_MS),
        retention_bytes=pick(retention_bytes, LOCAL_RETENTION_BYTES),
    )


def contiguous_suffix(segments: Sequence[SegmentMetadata]) -> list[SegmentMetadata]:
    """The newest run of segments without an offset gap or overlap (``segments`` in offset order): each
    starts exactly at the previous one's next offset."""
    if not segments:
        return []
    i = len(segments) - 1
    while i > 0 and segments[i - 1].next_offset == segments[i].base_offset:
        i -= 1
    return list(segments[i:])


def epochs_from(entries: Iterable[tuple[int, int]], log_start: int) -> tuple[EpochEntry, ...]:
    """Leader-epoch entries as Kafka keeps them for a log starting at ``log_start``: the entry covering
    ``log_start`` is moved up to it and older ones are dropped."""
    ordered = sorted((EpochEntry(e, s) for e, s in entries), key=lambda e: (e.start_offset, e.epoch))
    covering = [e for e in ordered if e.start_offset <= log_start]
    later = [e for e in ordered if e.start_offset > log_start]
    head = [EpochEntry(covering[-1].epoch, log_start)] if covering else []
    return tuple(head + later)


def plan_partition(obs: PartitionObservation, layout: RemoteLayout, now_ms: int) -> PartitionPlan:
    """Decide what to restore for one partition; raises RebuildRefused when restoring would be unsafe."""
    base = PartitionPlan(
        obs.topic, obs.partition, obs.topic_id, obs.leader, obs.log_start_offset, obs.high_watermark, None
    )
    where = f"{obs.topic}-{obs.partition}"
    if obs.manifest is None or not obs.manifest.segments:
        others = sorted(set(obs.remote_topic_ids) - {obs.topic_id})
        if others:
            raise RebuildRefused(
                f"{where}: the remote tier holds topic {obs.topic!r} only under topic id(s) "
                f"{', '.join(others)}, but Kafka's topic has id {obs.topic_id} (deleted and recreated?); "
                "refusing to restore another incarnation's data (exclude the topic to replicate it plainly)"
            )
        return replace(base, note="nothing tiered")
    manifest = obs.manifest
    wrong = [
        s
        for s in manifest.segments
        if s.topic_id != obs.topic_id or s.topic != obs.topic or s.partition != obs.partition
    ]
    if manifest.topic_id != obs.topic_id or wrong:
        raise RebuildRefused(
            f"{where}: remote metadata names topic id {manifest.topic_id}, Kafka says "
            f"{obs.topic_id}; refusing"
        )
    if obs.leader is None:
        raise RebuildRefused(
            f"{where}: the partition has no leader, so nothing can confirm what is committed"
        )

    committed = [s for s in manifest.segments if s.next_offset <= obs.high_watermark]
    run = contiguous_suffix(committed)
    summaries = [SegmentSummary(s.base_offset, s.next_offset, s.max_timestamp, s.size_bytes) for s in run]
    window = window_start(summaries, obs.policy, now_ms)
    start = max(window if window is not None else 0, obs.log_start_offset)
    chosen = [s for s in run if s.next_offset > start]
    base = replace(base, window_start=window)
    if not chosen:
        reason = (
            "the local window is empty" if run else "no tiered segment lies below the leader's high watermark"
        )
        return replace(base, note=reason)

    ids = {s.segment_id for s in chosen}
    clash = next((d for d in manifest.cover().divergences if {d.served, d.other} & ids), None)
    if clash is not None:
        raise RebuildRefused(f"{where}: {clash.describe()}; refusing to restore either copy")
    files: list[RestoreFile] = []
    for seg in chosen:
        if SegmentObject.LOG not in seg.objects:
            raise RebuildRefused(f"{where}: remote segment {seg.base_offset} lists no log object")
        for obj, kind in _SEGMENT_FILES:
            stored = seg.objects.get(obj)
            if stored is not None:
                files.append(
                    RestoreFile(
                        segment_file_name(seg.base_offset, kind),
                        layout.object_key(seg.tp, seg.base_offset, seg.segment_id, obj),
                        stored.size,
                        stored.crc32c,
                        stored.batch_chain_crc32c,
                    )
                )
    first = chosen[0].base_offset
    before = next((s for s in manifest.finished() if s.next_offset == first), None)
    note = ""
    if before is not None and SegmentObject.PRODUCER_SNAPSHOT in before.objects:
        stored = before.objects[SegmentObject.PRODUCER_SNAPSHOT]
        files.append(
            RestoreFile(
                segment_file_name(first, SegmentFileKind.PRODUCER_SNAPSHOT),
                layout.object_key(
                    before.tp, before.base_offset, before.segment_id, SegmentObject.PRODUCER_SNAPSHOT
                ),
                stored.size,
                stored.crc32c,
            )
        )
    elif first > 0:
        note = "no producer snapshot at the restored start; producer state is rebuilt from restored data only"
    return replace(
        base,
        segments=tuple(chosen),
        files=tuple(files),
        leader_epochs=epochs_from(chosen[-1].leader_epochs, first),
        note=note,
    )


def plan_rebuild(
    broker_id: int, observations: Iterable[PartitionObservation], layout: RemoteLayout, now_ms: int
) -> RebuildPlan:
    """Plan every partition; refusals are collected so the user sees all of them at once."""
    plan = RebuildPlan(broker_id)
    for obs in sorted(observations, key=lambda o: (o.topic, o.partition)):
        if broker_id not in obs.replicas:
            continue
        try:
            plan.partitions.append(plan_partition(obs, layout, now_ms))
        except RebuildRefused as exc:
            plan.refusals.append(str(exc))
    return plan
