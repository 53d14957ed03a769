"""The trim hold never keeps what Kafka's own retention would delete first (pure): a log start Tierkeeper
did not set expires the remote copies below it (KIP-405's rule), so a hold past Kafka's retention.ms or
retention.bytes would cost the tier its data."""

from __future__ import annotations

from storage_core.api.trim_hold import TrimHold
from storage_core.retention.local_trim import plan_local_trim
from storage_core.retention.policy import UNLIMITED, RetentionPolicy
from storage_core.retention.trim_hold import plan_held_trim
from storage_core.tiering.eligibility import TrimTiming, kafka_deletion_ceiling

from .segments import finished_segment

HOUR = 3600 * 1000
NOW = 1_000 * HOUR
# Ten tiered segments of 100 offsets and 100 bytes; segment i's newest record is (10 - i) hours old.
SEGMENTS = [finished_segment(i * 100, (i + 1) * 100, ts=NOW - (10 - i) * HOUR) for i in range(10)]
TIMING = TrimTiming(copy_interval_ms=HOUR, safety_margin_ms=HOUR)


def test_the_ceiling_is_kafkas_retention_less_the_trim_headroom() -> None:
    configs = {"retention.ms": str(9 * HOUR), "retention.bytes": "1000", "segment.bytes": "100"}
    assert kafka_deletion_ceiling(configs, TIMING) == RetentionPolicy(
        retention_ms=7 * HOUR, retention_bytes=800
    )
    # Kafka never deleting (-1, or not said) leaves the hold unlimited on that dimension.
    assert kafka_deletion_ceiling({"retention.ms": "-1"}, TIMING) == RetentionPolicy()
    assert kafka_deletion_ceiling({}, TIMING) == RetentionPolicy(retention_ms=UNLIMITED)
    # A retention shorter than the headroom trims everything the window allows, never a negative limit.
    assert kafka_deletion_ceiling({"retention.ms": str(HOUR)}, TIMING).retention_ms == 0


def test_a_hold_stops_where_kafkas_retention_would_delete_first() -> None:
    ceiling = kafka_deletion_ceiling({"retention.ms": str(9 * HOUR)}, TIMING)  # keep at most 7 h
    floor = plan_local_trim(SEGMENTS, 0, ceiling, NOW)
    assert floor == 300  # segments 0-2 are 8 h old and older
    plan = plan_held_trim(
        800, 0, SEGMENTS, {"stalled": 100, "near": 500}, TrimHold(max_age_ms=-1), NOW, kafka_floor=floor
    )
    assert (plan.to, plan.held_by, plan.overridden) == (
        300,
        (("near", 500),),
        (("stalled", 100, 300, "kafkaRetention"),),
    )


def test_the_trim_holds_bound_wins_when_it_reaches_further() -> None:
    plan = plan_held_trim(
        800, 0, SEGMENTS, {"stalled": 100}, TrimHold(max_age_ms=int(5.5 * HOUR)), NOW, kafka_floor=300
    )
    assert (plan.to, plan.overridden) == (500, (("stalled", 100, 500, "maxAge"),))


def test_a_kafka_that_never_deletes_leaves_the_hold_alone() -> None:
    floor = plan_local_trim(SEGMENTS, 0, kafka_deletion_ceiling({"retention.ms": "-1"}, TIMING), NOW)
    assert floor is None
    plan = plan_held_trim(800, 0, SEGMENTS, {"g": 100}, TrimHold(max_age_ms=-1), NOW, kafka_floor=floor)
    assert (plan.to, plan.held_by) == (100, (("g", 100),))
