"""The retention rules around a quarantined segment (pure): the local trim never passes a hole in the
readable segments, and the remote cleanup neither sweeps nor deletes a QUARANTINED segment."""

from __future__ import annotations

from storage_core.remote.layout import SegmentState
from storage_core.remote.metadata import Manifest
from storage_core.retention.local_trim import plan_local_trim
from storage_core.retention.policy import RetentionPolicy
from storage_core.retention.remote_plan import ListedSegment, plan_remote_cleanup

from .segments import TP
from .segments import finished_segment as _seg

NOW = 10_000_000


EVERYTHING_OLD = RetentionPolicy(retention_ms=1, retention_bytes=-1)


def test_local_trim_stops_at_a_hole_in_the_readable_segments() -> None:
    s0, s2, s3 = _seg(0, 100), _seg(200, 300), _seg(300, 400)  # 100..199 quarantined: not readable
    assert plan_local_trim([s0, s2, s3], 0, EVERYTHING_OLD, NOW) == 100
    # The log start inside the hole: nothing may go.
    assert plan_local_trim([s0, s2, s3], 150, EVERYTHING_OLD, NOW) is None
    # Past the hole the rule is as before (capped at the tiered end).
    assert plan_local_trim([s0, s2, s3], 250, EVERYTHING_OLD, NOW) == 400


def test_local_trim_without_a_hole_is_unchanged() -> None:
    segments = [_seg(0, 100), _seg(100, 200), _seg(200, 300)]
    assert plan_local_trim(segments, 0, EVERYTHING_OLD, NOW) == 300
    # Offsets between a segment's last offset and the next base never existed: no hole.
    gapless = [_seg(0, 100), _seg(100, 205)]
    gapless[0] = gapless[0].model_copy(update={"end_offset": 90})
    assert plan_local_trim(gapless, 0, EVERYTHING_OLD, NOW) == 205


def test_remote_cleanup_keeps_a_quarantined_segment_whatever_its_age() -> None:
    s0, s1, s2 = _seg(0, 100), _seg(100, 200), _seg(200, 300)
    manifest = Manifest.of(TP, [s0, s2])  # s1 is QUARANTINED: not in the manifest
    listed = [
        ListedSegment(s.base_offset, s.segment_id, state, modified_ms=0)
        for s, state in (
            (s0, SegmentState.COPY_FINISHED),
            (s1, SegmentState.QUARANTINED),
            (s2, SegmentState.COPY_FINISHED),
        )
    ]
    plan = plan_remote_cleanup(manifest.cover(), listed, EVERYTHING_OLD, NOW, orphan_grace_ms=1)
    touched = [d.segment.segment_id for d in plan.expire] + [
        s.segment_id for s in (*plan.orphans, *plan.resume, *plan.duplicates)
    ]
    assert s1.segment_id not in touched
    assert {d.segment.segment_id for d in plan.expire} == {s0.segment_id, s2.segment_id}


def test_offsets_remote_retention_expired_are_no_hole_unless_quarantined() -> None:
    # Remote retention expired 0..199 (the partition state records it): the broker's copy of them is past
    # the total retention.
    s2, s3 = _seg(200, 300), _seg(300, 400)
    assert plan_local_trim([s2, s3], 0, EVERYTHING_OLD, NOW, expired_offset=200) == 400
    # Without that record a tier beginning at 200 proves nothing: 0..199 are in no tier, they stay.
    assert plan_local_trim([s2, s3], 0, EVERYTHING_OLD, NOW) is None
    # The same gap held by a quarantined segment: the broker's copy may be the only good one.
    q1 = _seg(100, 200)
    assert plan_local_trim([s2, s3], 0, EVERYTHING_OLD, NOW, quarantined=[q1], expired_offset=200) == 100
    assert plan_local_trim([s2, s3], 120, EVERYTHING_OLD, NOW, quarantined=[q1], expired_offset=200) is None
    # A quarantined segment above the log start caps the trim at its base wherever it lies.
    s0, s1 = _seg(0, 100), _seg(100, 200)
    assert plan_local_trim([s0, s2, s3], 0, EVERYTHING_OLD, NOW, quarantined=[s1]) == 100
    # One wholly below the log start holds nothing any more.
    assert plan_local_trim([s2, s3], 250, EVERYTHING_OLD, NOW, quarantined=[s1]) == 400


def test_offsets_remote_retention_expired_leave_the_broker_even_when_the_window_keeps_the_rest() -> None:
    # Remote retention (by size) deleted 0..199 while the broker still held it, and what the tier holds
    # fits the local window: the broker's copy of 0..199 is past the total retention all the same, so the
    # trim moves the log start up to the remote start (KIP-405's rule). Found by the fault campaign: the
    # brokers kept, and the gateway served, a retention topic's expired history for ever.
    s2, s3 = _seg(200, 300), _seg(300, 400)
    window_keeps_all = RetentionPolicy(retention_ms=-1, retention_bytes=10_000)
    kw = {"expired_offset": 200}
    assert plan_local_trim([s2, s3], 0, window_keeps_all, NOW, untiered_local_bytes=50, **kw) == 200
    # No record of the expiry: the tier beginning above the log start alone trims nothing (review of
    # 93bf344: it inferred the expiry from that, which a tier begun above the log start would also show).
    assert plan_local_trim([s2, s3], 0, window_keeps_all, NOW, untiered_local_bytes=50) is None
    # No local window at all: Tierkeeper does not trim the topic (Kafka's retention does), as before.
    no_window = RetentionPolicy(retention_ms=-1, retention_bytes=-1)
    assert plan_local_trim([s2, s3], 0, no_window, NOW, **kw) is None
    # Held by a quarantined segment: only up to its base.
    assert plan_local_trim([s2, s3], 0, window_keeps_all, NOW, quarantined=[_seg(100, 200)], **kw) == 100
    # Nothing below the remote start any more: nothing to do.
    assert plan_local_trim([s2, s3], 200, window_keeps_all, NOW, **kw) is None
    assert plan_local_trim([s2, s3], 250, window_keeps_all, NOW, **kw) is None


def test_a_tier_remote_retention_emptied_still_trims_what_it_expired() -> None:
    # The seed 7 finding (docs/reliability.md): a clock jump expired every tiered segment, the tier was
    # left empty, and the trim (no tiered segment, so no plan) never moved the log start: the brokers kept
    # the expired history, and each copy tiered it again for retention to delete again.
    window_keeps_all = RetentionPolicy(retention_ms=-1, retention_bytes=10_000)
    assert plan_local_trim([], 0, window_keeps_all, NOW, expired_offset=400) == 400
    assert (
        plan_local_trim([], 0, window_keeps_all, NOW, quarantined=[_seg(100, 200)], expired_offset=400) == 100
    )
    assert plan_local_trim([], 400, window_keeps_all, NOW, expired_offset=400) is None
    assert plan_local_trim([], 0, window_keeps_all, NOW) is None
    assert (
        plan_local_trim([], 0, RetentionPolicy(retention_ms=-1, retention_bytes=-1), NOW, expired_offset=400)
        is None
    )


def test_remote_cleanup_plans_where_what_it_expires_ends() -> None:
    s0, s1, s2 = _seg(0, 100), _seg(100, 200, ts=NOW), _seg(200, 300, ts=NOW)
    listed = [ListedSegment(s.base_offset, s.segment_id, SegmentState.COPY_FINISHED, 0) for s in (s0, s1, s2)]
    by_time = RetentionPolicy(retention_ms=1000, retention_bytes=-1)
    assert (
        plan_remote_cleanup(Manifest.of(TP, [s0, s1, s2]).cover(), listed, by_time, NOW).expired_offset == 100
    )
    # Everything expired: up to the last segment's next offset.
    plan = plan_remote_cleanup(Manifest.of(TP, [s0, s1, s2]).cover(), listed, by_time, NOW + 10_000)
    assert plan.expired_offset == 300
    # A kept copy overlapping the expired one serves from its own base once that is gone.
    overlap = _seg(50, 300, ts=NOW)
    listed.append(ListedSegment(50, overlap.segment_id, SegmentState.COPY_FINISHED, 0))
    plan = plan_remote_cleanup(Manifest.of(TP, [s0, overlap]).cover(), listed[:1] + listed[3:], by_time, NOW)
    assert [d.segment.segment_id for d in plan.expire] == [s0.segment_id] and plan.expired_offset == 50
    # Nothing expired: nothing recorded.
    assert (
        plan_remote_cleanup(Manifest.of(TP, [s1, s2]).cover(), listed[1:3], by_time, NOW).expired_offset
        is None
    )
