"""The trim hold's decisions (pure): which groups hold, where the held trim goes, the bound, and what a
cleanup remembers of a group from one round to the next."""

from __future__ import annotations

import uuid

import pytest

from storage_core.adapters.kafka_groups import KafkaGroup
from storage_core.adapters.store import RemoteStore
from storage_core.api.trim_hold import TrimHold
from storage_core.cli.cleanup import _print_hold
from storage_core.errors import CorruptDataError
from storage_core.gateway.group_sightings import FRESH_MS, GroupSighting
from storage_core.jobs.cleanup_hold import TopicHold, group_seen
from storage_core.remote.catalog import read_trim_hold_state, write_trim_hold_state
from storage_core.remote.layout import RemoteLayout
from storage_core.remote.metadata import GroupMemory, TrimHoldState
from storage_core.retention.trim_hold import GroupSeen, group_holds, holding_offsets, plan_held_trim, remember

from .segments import TP, finished_segment

HOUR = 3600 * 1000
NOW = 1_000 * HOUR
# Ten tiered segments of 100 offsets and 100 bytes; segment i's newest record is (10 - i) hours old.
SEGMENTS = [finished_segment(i * 100, (i + 1) * 100, ts=NOW - (10 - i) * HOUR) for i in range(10)]
WINDOW_TO = 800
HOLD = TrimHold()


def _plan(
    holders: dict[str, int], hold: TrimHold = HOLD, *, log_start: int = 0, expired_offset: int | None = None
) -> tuple[object, ...]:
    plan = plan_held_trim(WINDOW_TO, log_start, SEGMENTS, holders, hold, NOW, expired_offset=expired_offset)
    return plan.to, plan.held_by, plan.overridden


def test_nothing_to_trim_holds_nothing() -> None:
    plan = plan_held_trim(None, 0, SEGMENTS, {"g": 5}, HOLD, NOW)
    assert (plan.window_to, plan.to, plan.held_by, plan.overridden) == (None, None, (), ())


def test_without_holders_the_window_decides() -> None:
    assert _plan({}) == (WINDOW_TO, (), ())
    # A commit at or above the window's target needs nothing the trim removes.
    assert _plan({"at": WINDOW_TO, "above": 900}) == (WINDOW_TO, (), ())


def test_the_lowest_commit_below_the_window_holds() -> None:
    assert _plan({"a": 400, "b": 250, "above": 900}) == (250, (("b", 250), ("a", 400)), ())


def test_the_age_bound_overrides_a_group_that_stalled_past_it() -> None:
    # Segments 0-4 are 6 hours old and older: past a 5.5 h bound, the trim goes to 500 whatever holds it.
    hold = TrimHold(max_age_ms=int(5.5 * HOUR))
    assert _plan({"stalled": 250, "behind": 600}, hold) == (
        500,
        (("behind", 600),),
        (("stalled", 250, 500, "maxAge"),),
    )
    # Within the bound the group holds.
    assert _plan({"stalled": 250}, TrimHold(max_age_ms=20 * HOUR))[0] == 250


def test_the_bytes_bound_counts_only_the_held_data() -> None:
    # 250 bytes beyond the window keep two of the eight held 100-byte segments: the trim goes to 600.
    hold = TrimHold(max_age_ms=-1, max_bytes=250)
    assert _plan({"g": 250}, hold) == (600, (), (("g", 250, 600, "maxBytes"),))


def test_the_bound_never_passes_the_window() -> None:
    hold = TrimHold(max_age_ms=1)
    assert _plan({"g": 250}, hold) == (WINDOW_TO, (), (("g", 250, WINDOW_TO, "maxAge"),))


def test_what_remote_retention_expired_goes_whatever_holds_it() -> None:
    assert _plan({"g": 250, "h": 350}, expired_offset=300) == (
        300,
        (("h", 350),),
        (("g", 250, 300, "retention"),),
    )


def test_a_group_below_the_log_start_keeps_the_rest_on_the_brokers() -> None:
    assert _plan({"g": 100}, log_start=300) == (None, (("g", 100),), ())


def test_the_report_shape() -> None:
    plan = plan_held_trim(
        WINDOW_TO, 0, SEGMENTS, {"g": 250, "h": 700}, TrimHold(max_age_ms=int(5.5 * HOUR)), NOW
    )
    assert plan.report() == {
        "window_to": WINDOW_TO,
        "to": 500,
        "held_by": [{"group": "h", "offset": 700}],
        "overridden": [{"group": "g", "offset": 250, "to": 500, "reason": "maxAge"}],
    }


def _seen(group: str = "g", members: int = 0, direct: bool = False, gateway: int | None = None) -> GroupSeen:
    return GroupSeen(group, {0: 5}, members, direct, gateway)


def test_a_group_with_a_direct_member_holds_one_read_only_through_gateways_does_not() -> None:
    memory = GroupMemory()
    assert group_holds(_seen(members=2, direct=True), memory, HOLD, NOW)
    assert not group_holds(_seen(members=2, direct=False, gateway=NOW), memory, HOLD, NOW)
    # Without a committed offset on the topic there is nothing to hold.
    assert not group_holds(GroupSeen("g", {}, 1, True), memory, HOLD, NOW)


def test_ignored_groups_never_hold() -> None:
    hold = TrimHold(ignore_groups=["connect-*", "exact"])
    assert not group_holds(_seen("connect-sink", 1, True), GroupMemory(), hold, NOW)
    assert not group_holds(_seen("exact", 1, True), GroupMemory(), hold, NOW)
    assert group_holds(_seen("exactly", 1, True), GroupMemory(), hold, NOW)


def test_an_empty_group_holds_by_how_it_was_last_seen_and_for_how_long() -> None:
    hold = TrimHold(inactive_group_ms=HOUR)
    # Never seen with members, no gateway reports it: unknown history holds.
    assert group_holds(_seen(), GroupMemory(empty_since_ms=NOW), hold, NOW)
    # ... until it has been empty for longer than inactive_group_ms.
    assert group_holds(_seen(), GroupMemory(empty_since_ms=NOW - HOUR), hold, NOW)
    assert not group_holds(_seen(), GroupMemory(empty_since_ms=NOW - HOUR - 1), hold, NOW)
    assert group_holds(_seen(), GroupMemory(empty_since_ms=0), TrimHold(inactive_group_ms=-1), NOW)
    # Last seen reading through a gateway (by a cleanup, or by a sighting newer than the direct one).
    assert not group_holds(_seen(), GroupMemory(empty_since_ms=NOW, gateway_seen_ms=NOW - 5), hold, NOW)
    assert not group_holds(
        _seen(gateway=NOW - 5), GroupMemory(empty_since_ms=NOW, direct_seen_ms=NOW - 9), hold, NOW
    )
    # Last seen reading directly.
    assert group_holds(
        _seen(gateway=NOW - 9), GroupMemory(empty_since_ms=NOW, direct_seen_ms=NOW - 5), hold, NOW
    )


def test_remember_keeps_what_kafka_does_not_say() -> None:
    at = {0: 5}
    first = remember(TrimHoldState(), [_seen("direct", 1, True), _seen("empty"), GroupSeen("elsewhere")], NOW)
    assert first.groups == {
        "direct": GroupMemory(direct_seen_ms=NOW, committed=at),
        "empty": GroupMemory(empty_since_ms=NOW, committed=at),
    }
    later = NOW + HOUR
    second = remember(first, [_seen("direct"), _seen("empty"), _seen("gw", 1, False)], later)
    assert second.groups == {
        "direct": GroupMemory(empty_since_ms=later, direct_seen_ms=NOW, committed=at),
        "empty": GroupMemory(empty_since_ms=NOW, committed=at),  # since the first round that saw it so
        "gw": GroupMemory(gateway_seen_ms=later, committed=at),
    }
    # Members again: no longer empty. A group Kafka no longer lists is forgotten.
    third = remember(second, [_seen("empty", 1, True)], later + 1)
    assert third.groups == {"empty": GroupMemory(direct_seen_ms=later + 1, committed=at)}
    assert holding_offsets([_seen("empty", 1, True)], third, HOLD, later + 1) == {"empty": at}


def test_an_empty_group_whose_commits_move_is_still_reading() -> None:
    hold = TrimHold(inactive_group_ms=HOUR)
    first = remember(TrimHoldState(), [GroupSeen("flink", {0: 5})], NOW)
    moved = GroupSeen("flink", {0: 9})
    second = remember(first, [moved], NOW + 2 * HOUR)
    assert second.groups["flink"].empty_since_ms == NOW + 2 * HOUR
    assert group_holds(moved, second.groups["flink"], hold, NOW + 2 * HOUR)
    # Its commits stand still from then on: it stops holding once inactive_group_ms has passed.
    third = remember(second, [moved], NOW + 3 * HOUR + 1)
    assert not group_holds(moved, third.groups["flink"], hold, NOW + 3 * HOUR + 1)


def _sighting(group: str, members: tuple[str, ...], seen_ms: int) -> dict[str, list[GroupSighting]]:
    return {group: [GroupSighting(group=group, gateway="gw-0", members=members, seen_ms=seen_ms)]}


def test_a_member_is_direct_when_no_fresh_sighting_carried_any_of_its_ids() -> None:
    sightings = _sighting("g", ("m1", "static-3"), NOW - 1000)
    through = KafkaGroup("g", "classic", (("m1", None), ("m3", "static-3")), {0: 5})
    seen = group_seen(through, sightings, NOW)
    assert (seen.members, seen.direct, seen.gateway_seen_ms) == (2, False, NOW - 1000)
    both = KafkaGroup("g", "consumer", (("m1", None), ("m2", None)), {0: 5})
    assert group_seen(both, sightings, NOW).direct, "seen through a gateway and directly: holds"
    stale = _sighting("g", ("m1",), NOW - FRESH_MS - 1)
    assert group_seen(KafkaGroup("g", "classic", (("m1", None),), {0: 5}), stale, NOW).direct


def test_topic_hold_per_partition() -> None:
    hold = TopicHold({"a": {0: 5, 1: 7}, "b": {1: 3}})
    assert hold.on(0) == {"a": 5} and hold.on(1) == {"a": 7, "b": 3} and hold.on(2) == {}


def test_the_memory_round_trips_and_an_unreadable_one_is_an_error_naming_it() -> None:
    store = RemoteStore(f"memory://trim-hold-{uuid.uuid4().hex}")
    layout = RemoteLayout(store.root)
    assert read_trim_hold_state(store, layout, TP.topic, TP.topic_id) == TrimHoldState()
    state = TrimHoldState(groups={"g": GroupMemory(empty_since_ms=NOW)})
    write_trim_hold_state(store, layout, TP.topic, TP.topic_id, state)
    assert read_trim_hold_state(store, layout, TP.topic, TP.topic_id) == state
    store.put_atomic(layout.trim_hold_state_key(TP.topic, TP.topic_id), b'{"groups": 3}')
    with pytest.raises(CorruptDataError, match="trim-hold-groups.json"):
        read_trim_hold_state(store, layout, TP.topic, TP.topic_id)


def test_the_text_report_names_what_holds_and_what_the_trim_passes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = plan_held_trim(
        WINDOW_TO, 0, SEGMENTS, {"g": 250, "h": 700}, TrimHold(max_age_ms=int(5.5 * HOUR)), NOW
    )
    _print_hold("t-0", plan.report())
    _print_hold("t-1", {"unknown": "consumer group offsets unavailable: timeout"})
    assert capsys.readouterr().out.splitlines() == [
        "t-0: local trim held at 500 by group h (committed 700)",
        "t-0: trim passes group g (maxAge): it misses offsets 250..499 on the brokers",
        "t-1: local trim held where it was: consumer group offsets unavailable: timeout",
    ]
