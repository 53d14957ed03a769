"""The cover rule for overlapping remote segments (storage_core/remote/cover.py), as a pure function.

Property tests: whatever set of finished segments a partition holds (retried copies, copies from several
leaders rolling at different offsets, empty segments, unfinished attempts), the cover serves every held
offset exactly once, from a segment that holds it, and chooses by the documented precedence.
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from storage_core.remote.cover import cover_order, epochs_over, resolve_cover
from storage_core.remote.layout import SegmentState, TopicPartitionId
from storage_core.remote.metadata import Manifest, SegmentMetadata
from storage_core.retention.policy import RetentionPolicy
from storage_core.retention.remote_plan import ListedSegment, plan_remote_cleanup

TP = TopicPartitionId("orders", "AAAAAAAAQACAAAAAAAAAAQ", 0)


def seg(
    base: int,
    end: int,
    *,
    n: int,
    finished_at: int = 0,
    epochs: list[tuple[int, int]] | None = None,
    state: SegmentState = SegmentState.COPY_FINISHED,
    max_ts: int = 0,
) -> SegmentMetadata:
    return SegmentMetadata(
        topic=TP.topic,
        topic_id=TP.topic_id,
        partition=0,
        segment_id=uuid.UUID(int=n),
        base_offset=base,
        end_offset=end,
        next_offset=end + 1,
        max_timestamp=max_ts,
        size_bytes=max(0, end - base + 1) * 10,
        leader_epochs=[(0, 0)] if epochs is None else epochs,
        state=state,
        event_time_ms=finished_at,
    )


@st.composite
def segment_sets(draw: st.DrawFn) -> list[SegmentMetadata]:
    """Segments as leader changes make them: each 'broker' rolls its own boundaries over one log."""
    out: list[SegmentMetadata] = []
    n = 0
    for _ in range(draw(st.integers(1, 4))):  # copies from up to four leaders
        start = draw(st.integers(0, 60))
        count = draw(st.integers(1, 5))
        base = start
        for _ in range(count):
            length = draw(st.integers(0, 30))  # 0: an empty segment
            n += 1
            state = draw(st.sampled_from([SegmentState.COPY_FINISHED] * 4 + [SegmentState.COPY_STARTED]))
            out.append(seg(base, base + length - 1, n=n, finished_at=draw(st.integers(0, 5)), state=state))
            base += max(length, 1)
    return out


def held(segments: list[SegmentMetadata]) -> set[int]:
    return {
        o
        for s in segments
        if s.state is SegmentState.COPY_FINISHED
        for o in range(s.base_offset, s.end_offset + 1)
    }


@settings(max_examples=400, deadline=None)
@given(segment_sets())
def test_every_held_offset_is_served_exactly_once_by_a_segment_holding_it(
    segments: list[SegmentMetadata],
) -> None:
    cover = resolve_cover(segments)
    served: list[int] = []
    for r in cover.ranges:
        assert r.segment.state is SegmentState.COPY_FINISHED
        assert r.segment.base_offset <= r.first_offset <= r.last_offset == r.segment.end_offset
        served.extend(range(r.first_offset, r.last_offset + 1))
    assert served == sorted(set(served)), "ranges overlap or are out of order"
    assert set(served) == held(segments)
    finished = [s for s in segments if s.state is SegmentState.COPY_FINISHED]
    assert len(cover.ranges) + len(cover.shadowed) == len(finished)
    assert not cover.divergences  # one log, one epoch: copies agree


@settings(max_examples=400, deadline=None)
@given(segment_sets(), st.integers(0, 200))
def test_each_offset_comes_from_the_lowest_base_then_earliest_finished_segment(
    segments: list[SegmentMetadata], offset: int
) -> None:
    cover = resolve_cover(segments)
    holders = [
        s
        for s in segments
        if s.state is SegmentState.COPY_FINISHED and s.base_offset <= offset <= s.end_offset
    ]
    i = cover.index_for_offset(offset)
    if not holders:
        assert i is None or cover.ranges[i].first_offset > offset
        return
    assert i is not None and cover.ranges[i].first_offset <= offset
    assert cover.ranges[i].segment == min(holders, key=cover_order)


@settings(max_examples=200, deadline=None)
@given(segment_sets())
def test_the_rule_does_not_depend_on_listing_order_and_survives_the_manifest(
    segments: list[SegmentMetadata],
) -> None:
    cover = resolve_cover(segments)
    assert resolve_cover(list(reversed(segments))) == cover
    manifest = Manifest.of(TP, segments)
    stored = Manifest.model_validate_json(manifest.model_dump_json())
    assert stored.cover() == cover
    assert stored.segments == cover.segments
    ends = [s.end_offset for s in stored.segments]
    assert ends == sorted(set(ends))


def test_the_issue_case_old_leader_segment_then_new_leader_segment() -> None:
    old = seg(30732, 33071, n=1, finished_at=1)
    new = seg(32621, 39999, n=2, finished_at=2)
    cover = resolve_cover([new, old])
    assert [(r.segment.segment_id, r.first_offset, r.last_offset) for r in cover.ranges] == [
        (old.segment_id, 30732, 33071),
        (new.segment_id, 33072, 39999),
    ]
    assert not cover.ranges[1].whole and cover.next_offset == 40000


def test_a_new_leader_copy_that_holds_a_later_old_segment_shadows_it() -> None:
    a, c = seg(0, 100, n=1, finished_at=1), seg(101, 150, n=2, finished_at=2)
    b = seg(50, 200, n=3, finished_at=3)
    cover = resolve_cover([a, b, c])
    assert [(r.first_offset, r.last_offset) for r in cover.ranges] == [(0, 100), (101, 200)]
    assert cover.shadowed == (c,)


def test_epoch_lineage_is_compared_over_the_shared_offsets_only() -> None:
    # A follower that started from a trimmed log start has its first epoch entry at its own base offset.
    old = seg(0, 100, n=1, epochs=[(0, 0), (3, 40)])
    new = seg(60, 300, n=2, epochs=[(3, 60), (4, 250)])
    assert epochs_over(old, 60, 100) == epochs_over(new, 60, 100) == ((3, 60),)
    assert not resolve_cover([old, new]).divergences


def test_an_unclean_election_is_reported_and_stops_retention_and_duplicate_removal() -> None:
    # The old leader wrote 80..100 in epoch 3; the new leader (unclean) has other data there, epoch 4.
    old = seg(0, 100, n=1, epochs=[(3, 0)], max_ts=1)
    new = seg(60, 300, n=2, epochs=[(3, 60), (4, 80)], max_ts=1)
    shadowed = seg(90, 100, n=3, epochs=[(4, 80)], finished_at=9, max_ts=1)
    cover = resolve_cover([old, new, shadowed])
    assert [(d.first_offset, d.last_offset) for d in cover.divergences] == [(60, 100), (90, 100)]
    # Readers refuse the range holding contested offsets; the uncontested offsets after it stay readable.
    assert cover.divergence_in(0, 100) is not None and cover.divergence_in(101, 300) is None

    listed = [ListedSegment(s.base_offset, s.segment_id, s.state, 0) for s in (old, new, shadowed)]
    plan = plan_remote_cleanup(cover, listed, RetentionPolicy(retention_ms=1), now_ms=10**6)
    assert plan.expire == [] and plan.duplicates == []
    assert len(plan.divergent) == 2


def test_a_segment_without_recorded_epochs_is_trusted() -> None:
    cover = resolve_cover([seg(0, 100, n=1, epochs=[]), seg(60, 200, n=2, epochs=[(7, 60)])])
    assert not cover.divergences


def test_retention_deletes_a_prefix_of_serving_segments_and_the_duplicates() -> None:
    a = seg(0, 100, n=1, finished_at=1, max_ts=10)
    c = seg(101, 150, n=2, finished_at=2, max_ts=20)
    b = seg(50, 200, n=3, finished_at=3, max_ts=10**7)
    cover = resolve_cover([a, b, c])
    listed = [ListedSegment(s.base_offset, s.segment_id, s.state, 0) for s in (a, b, c)]
    plan = plan_remote_cleanup(cover, listed, RetentionPolicy(retention_ms=1000), now_ms=10**6)
    assert [d.segment for d in plan.expire] == [a]
    assert [d.segment_id for d in plan.duplicates] == [c.segment_id]
    after = resolve_cover([b])
    assert (after.start_offset, after.end_offset) == (50, 200)  # b now serves what a served before


def test_log_start_retention_deletes_a_segment_only_when_the_next_one_holds_every_needed_offset() -> None:
    a, b = seg(0, 100, n=1, finished_at=1), seg(50, 200, n=2, finished_at=2)
    listed = [ListedSegment(s.base_offset, s.segment_id, s.state, 0) for s in (a, b)]

    def expired(log_start: int) -> list[SegmentMetadata]:
        plan = plan_remote_cleanup(
            resolve_cover([a, b]), listed, RetentionPolicy(), 0, log_start_offset=log_start
        )
        return [d.segment for d in plan.expire]

    assert expired(49) == []  # a alone holds offset 49
    assert expired(50) == [a]  # b holds everything from 50 on once a is gone
    assert expired(101) == [a]
    assert expired(201) == [a, b]


@settings(max_examples=300, deadline=None)
@given(segment_sets(), st.integers(0, 200), st.sampled_from([-1, 0, 100, 300, 1000, 3000]))
def test_retention_never_deletes_an_offset_still_needed(
    segments: list[SegmentMetadata], log_start: int, retention_bytes: int
) -> None:
    """Deletions (retention, the log start, duplicates) leave the kept data without a hole, and the log
    start rule alone never deletes the only copy of an offset at or above the log start."""
    listed = [ListedSegment(s.base_offset, s.segment_id, s.state, 0) for s in segments]
    policy = RetentionPolicy(retention_bytes=retention_bytes)
    plan = plan_remote_cleanup(resolve_cover(segments), listed, policy, 0, log_start_offset=log_start)
    gone = {d.segment.segment_id for d in plan.expire} | {d.segment_id for d in plan.duplicates}
    kept = [s for s in segments if s.segment_id not in gone]
    after = resolve_cover(kept)
    if after.start_offset is not None:
        assert held(kept) >= {o for o in held(segments) if o >= after.start_offset}
    if retention_bytes == -1:
        assert {o for o in held(segments) if o >= log_start} <= held(kept)


@settings(max_examples=300, deadline=None)
@given(segment_sets(), st.lists(st.integers(1, 250), max_size=5, unique=True), st.booleans())
def test_copies_of_one_log_never_diverge_and_a_rewritten_lineage_always_does(
    segments: list[SegmentMetadata], epoch_starts: list[int], follower_view: bool
) -> None:
    """One log's lineage (epoch i starts at the i-th start), as each copy records it: up to its end,
    and, for a follower that started inside the log (``follower_view``), moved up to its own base."""
    lineage = [(0, 0)] + [(i + 1, start) for i, start in enumerate(sorted(epoch_starts))]

    def recorded(s: SegmentMetadata) -> list[tuple[int, int]]:
        upto = [(e, st_) for e, st_ in lineage if st_ <= max(s.end_offset, s.base_offset)]
        if follower_view:
            covering = [(e, st_) for e, st_ in upto if st_ <= s.base_offset][-1]
            upto = [(covering[0], s.base_offset)] + [(e, st_) for e, st_ in upto if st_ > s.base_offset]
        return upto

    clean = [s.model_copy(update={"leader_epochs": recorded(s)}) for s in segments]
    assert resolve_cover(clean).divergences == ()

    # Rewrite the lineage of one overlapped segment: the disagreement is always found.
    cover = resolve_cover(clean)
    overlapped = [s for s in cover.shadowed if s.end_offset >= s.base_offset] + [
        r.segment for r in cover.ranges if not r.whole
    ]
    if overlapped:
        victim = overlapped[0]
        forged = victim.model_copy(update={"leader_epochs": [(99, 0)]})
        diverged = resolve_cover([forged if s.segment_id == victim.segment_id else s for s in clean])
        assert victim.segment_id in diverged.divergent_segments()
