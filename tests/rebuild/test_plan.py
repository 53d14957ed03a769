"""The rebuild planner: what is restored for a partition, checked against the definitions it must meet."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_core.formats.checkpoints import EpochEntry
from storage_core.rebuild.plan import (
    PartitionObservation,
    RebuildRefused,
    epochs_from,
    plan_partition,
    plan_rebuild,
    resolve_policy,
)
from storage_core.remote.layout import RemoteLayout, SegmentObject
from storage_core.retention.policy import UNLIMITED, RetentionPolicy

from .segments import OTHER_TOPIC_ID, TOPIC, TOPIC_ID, Seg, build_segments, manifest_of

LAYOUT = RemoteLayout("bucket/prefix")
NOW = 10_000_000


def observation(
    segments: list,
    *,
    hw: int,
    log_start: int = 0,
    policy: RetentionPolicy | None = None,
    partition: int = 0,
    leader: int | None = 1,
    remote_topic_ids: tuple[str, ...] = (TOPIC_ID,),
    manifest_topic_id: str = TOPIC_ID,
) -> PartitionObservation:
    """What the planner sees of one partition of TOPIC whose tier holds ``segments``."""
    return PartitionObservation(
        TOPIC,
        partition,
        TOPIC_ID,
        leader,
        (1, 2, 3),
        log_start,
        hw,
        policy=policy or RetentionPolicy(),
        remote_topic_ids=remote_topic_ids,
        manifest=manifest_of(segments, partition=partition, topic_id=manifest_topic_id) if segments else None,
    )


seg_specs = st.lists(
    st.builds(
        Seg,
        records=st.integers(1, 50),
        size=st.integers(1, 5000),
        max_ts=st.integers(NOW - 100_000, NOW),
        snapshot=st.booleans(),
    ),
    min_size=0,
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(
    specs=seg_specs,
    hw_extra=st.integers(-60, 60),
    start_frac=st.floats(0, 1),
    ms=st.one_of(st.just(UNLIMITED), st.integers(0, 120_000)),
    size_limit=st.one_of(st.just(UNLIMITED), st.integers(0, 60_000)),
)
def test_restored_run_meets_every_rule(
    specs: list[Seg], hw_extra: int, start_frac: float, ms: int, size_limit: int
) -> None:
    segments = build_segments(specs, start=7)
    end = segments[-1].next_offset if segments else 7
    hw = max(0, end + hw_extra)
    log_start = int(start_frac * hw)
    policy = RetentionPolicy(retention_ms=ms, retention_bytes=size_limit)
    plan = plan_partition(observation(segments, hw=hw, log_start=log_start, policy=policy), LAYOUT, NOW)
    chosen = list(plan.segments)
    committed = [s for s in segments if s.next_offset <= hw]

    # Only committed data the leader still has, as one gap-free run ending at the newest committed segment.
    assert all(s.next_offset <= hw for s in chosen)
    assert all(a.next_offset == b.base_offset for a, b in zip(chosen, chosen[1:]))
    if chosen:
        assert chosen[-1] == committed[-1]
        assert chosen[0].next_offset > log_start
    # The window: a time limit drops the oldest segments while they are all older than the cutoff; a byte
    # limit keeps the newest segments that fit. The run is the larger of neither-rule survivors.
    keep_time = len(committed)
    if ms != UNLIMITED:
        keep_time = next(
            (len(committed) - i for i, s in enumerate(committed) if s.max_timestamp >= NOW - ms), 0
        )
    keep_bytes = len(committed)
    if size_limit != UNLIMITED:
        keep_bytes = 0
        while (
            keep_bytes < len(committed)
            and sum(s.size_bytes for s in committed[-keep_bytes - 1 :]) <= size_limit
        ):
            keep_bytes += 1
    by_window = committed[len(committed) - min(keep_time, keep_bytes) :]
    assert chosen == [s for s in by_window if s.next_offset > log_start]
    # Files: the three segment files each, plus the snapshot that the segment before the run took.
    names = [f.name for f in plan.files]
    assert len(names) == len(set(names))
    for s in chosen:
        assert f"{s.base_offset:020d}.log" in names
    if chosen:
        before = [s for s in segments if s.next_offset == chosen[0].base_offset]
        wants_snapshot = bool(before) and SegmentObject.PRODUCER_SNAPSHOT in before[0].objects
        assert (f"{chosen[0].base_offset:020d}.snapshot" in names) == wants_snapshot
        assert plan.leader_epochs[0].start_offset == chosen[0].base_offset
        assert plan.restored == (chosen[0].base_offset, chosen[-1].next_offset)
        assert plan.expected_tail == max(0, hw - chosen[-1].next_offset)
        assert plan.bytes == sum(f.size for f in plan.files)
    else:
        assert plan.files == ()


def test_snapshot_comes_from_the_segment_before_the_window() -> None:
    segments = build_segments([Seg(10, 100, NOW)] * 6)
    plan = plan_partition(
        observation(segments, hw=60, policy=RetentionPolicy(retention_bytes=250)), LAYOUT, NOW
    )
    assert [s.base_offset for s in plan.segments] == [40, 50]
    snapshot = [f for f in plan.files if f.name.endswith(".snapshot")]
    assert [f.name for f in snapshot] == ["00000000000000000040.snapshot"]
    third = segments[3]
    assert snapshot[0].key == LAYOUT.object_key(
        third.tp, third.base_offset, third.segment_id, SegmentObject.PRODUCER_SNAPSHOT
    )


def test_segments_above_the_high_watermark_are_not_restored() -> None:
    segments = build_segments([Seg(10, 100, NOW)] * 4)
    plan = plan_partition(observation(segments, hw=35), LAYOUT, NOW)
    assert plan.restored == (0, 30)
    assert plan.expected_tail == 5


def test_a_gap_keeps_only_the_newest_contiguous_run() -> None:
    left = build_segments([Seg(10, 100, NOW)] * 2)
    right = build_segments([Seg(10, 100, NOW)] * 2, start=40)
    plan = plan_partition(observation(left + right, hw=60), LAYOUT, NOW)
    assert [s.base_offset for s in plan.segments] == [40, 50]


def test_leader_log_start_cuts_the_run() -> None:
    segments = build_segments([Seg(10, 100, NOW)] * 5)
    plan = plan_partition(observation(segments, hw=50, log_start=25), LAYOUT, NOW)
    assert plan.restored == (20, 50)


def test_untiered_partition_restores_nothing() -> None:
    plan = plan_partition(observation([], hw=1000, log_start=10), LAYOUT, NOW)
    assert not plan.restores and plan.restored is None and plan.note == "nothing tiered"
    assert plan.expected_tail == 990


def test_other_topic_incarnation_is_refused() -> None:
    obs = observation([], hw=100, remote_topic_ids=(OTHER_TOPIC_ID,))
    with pytest.raises(RebuildRefused, match="topic id"):
        plan_partition(obs, LAYOUT, NOW)


def test_metadata_of_another_topic_id_is_refused() -> None:
    segments = build_segments([Seg(10, 100, NOW)] * 2, topic_id=OTHER_TOPIC_ID)
    obs = observation(segments, hw=100, manifest_topic_id=OTHER_TOPIC_ID)
    with pytest.raises(RebuildRefused):
        plan_partition(obs, LAYOUT, NOW)


def test_leaderless_partition_is_refused_and_reported_with_the_rest() -> None:
    segments = build_segments([Seg(10, 100, NOW)] * 2)
    good = observation(segments, hw=20, partition=0)
    leaderless = observation(
        build_segments([Seg(10, 100, NOW)], partition=1), hw=10, partition=1, leader=None
    )
    not_mine = PartitionObservation(
        TOPIC,
        2,
        TOPIC_ID,
        1,
        (1, 2),
        0,
        0,
        policy=RetentionPolicy(),
        remote_topic_ids=(TOPIC_ID,),
        manifest=None,
    )
    plan = plan_rebuild(3, [leaderless, good, not_mine], LAYOUT, NOW)
    assert [p.partition for p in plan.partitions] == [0]
    assert len(plan.refusals) == 1 and "no leader" in plan.refusals[0]


def test_policy_resolution_prefers_flags_then_real_topic_values() -> None:
    config = {"local.retention.ms": "-2", "local.retention.bytes": "4096"}
    assert resolve_policy(config, retention_ms=None, retention_bytes=None) == RetentionPolicy(
        retention_ms=UNLIMITED, retention_bytes=4096
    )
    assert resolve_policy(config, retention_ms=60_000, retention_bytes=-1) == RetentionPolicy(
        retention_ms=60_000, retention_bytes=UNLIMITED
    )
    assert resolve_policy({}, retention_ms=None, retention_bytes=None) == RetentionPolicy()


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 1000)), max_size=12), st.integers(0, 1200))
def test_epochs_cover_the_restored_start_like_kafkas_truncate_from_start(
    entries: list[tuple[int, int]], start: int
) -> None:
    entries = sorted({(e, s) for e, s in entries}, key=lambda x: (x[1], x[0]))
    got = epochs_from(entries, start)
    assert all(e.start_offset >= start for e in got)
    for offset in range(start, 1300, 37):
        # The epoch in force at any offset >= start is the same before and after.
        before = [EpochEntry(e, s) for e, s in entries if s <= offset]
        after = [e for e in got if e.start_offset <= offset]
        if before:
            assert after and after[-1].epoch == max(before, key=lambda x: (x.start_offset, x.epoch)).epoch
