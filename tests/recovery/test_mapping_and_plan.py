"""Offset mapping runs and the recovery decisions, on plain data."""

from __future__ import annotations

import random
import uuid

import pytest

from storage_core.errors import ConfigError
from storage_core.recovery.incarnations import Incarnation, PartitionHistory, choose_source
from storage_core.recovery.mapping import OffsetRun, concat_runs, is_shifted, new_offset, runs_from_pairs
from storage_core.recovery.plan import LiveTopic, PlanOptions, check_target_configs, plan_topic
from storage_core.recovery.state import Claim, Progress
from storage_core.remote.layout import SegmentState, TopicPartitionId
from storage_core.remote.metadata import Manifest, SegmentMetadata

# ---- mapping ----------------------------------------------------------------------------------------


def _simulated_restore(seed: int) -> dict[int, int]:
    """Old offsets with holes (aborted data, markers) restored in transactions that each add a marker."""
    rng = random.Random(seed)
    old, new, out = 0, 0, {}
    for _ in range(40):
        for _ in range(rng.randint(1, 30)):  # one restore transaction
            old += rng.choice([1, 1, 1, 2, 7])  # sometimes a hole in the old log
            out[old] = new
            new += 1
        new += 1  # the commit marker
    return out


@pytest.mark.parametrize("seed", range(5))
def test_runs_answer_every_old_offset_like_the_pairs_they_came_from(seed: int) -> None:
    pairs = _simulated_restore(seed)
    runs = runs_from_pairs(pairs.items())
    assert sum(r.length for r in runs) == len(pairs)
    for old in range(max(pairs) + 2):
        assert new_offset(runs, old) == pairs.get(old)


def test_concat_merges_a_run_that_continues_across_chunks() -> None:
    first = runs_from_pairs([(10, 0), (11, 1)])
    second = runs_from_pairs([(12, 2), (14, 3)])
    assert concat_runs([first, second]) == [OffsetRun(10, 0, 3), OffsetRun(14, 3, 1)]


def test_pairs_that_go_backwards_are_rejected() -> None:
    with pytest.raises(ValueError):
        runs_from_pairs([(1, 5), (2, 5)])


def test_shift_is_reported_only_when_offsets_move() -> None:
    assert not is_shifted([OffsetRun(0, 0, 10)])
    assert is_shifted([OffsetRun(0, 0, 10), OffsetRun(11, 10, 3)])


def test_progress_survives_its_encoding_and_ignores_foreign_metadata() -> None:
    progress = Progress(source="x" * 22, next_old=12345, restored=999)
    assert Progress.decode(progress.encode()) == progress
    assert len(progress.encode()) < 4096
    assert Progress.decode("written by someone else") is None
    assert Progress.decode(None) is None


# ---- plan -------------------------------------------------------------------------------------------


def _incarnation(
    topic_id: str, ends: dict[int, int | None], copied_at: int = 1_700_000_000_000
) -> Incarnation:
    partitions = {}
    for p, end in ends.items():
        tp = TopicPartitionId("t", topic_id, p)
        segments = (
            []
            if end is None
            else [
                SegmentMetadata(
                    topic="t",
                    topic_id=topic_id,
                    partition=p,
                    segment_id=uuid.uuid4(),
                    base_offset=0,
                    end_offset=end,
                    next_offset=end + 1,
                    size_bytes=100,
                    first_timestamp=1000,
                    max_timestamp=2000,
                    state=SegmentState.COPY_FINISHED,
                    event_time_ms=copied_at,
                )
            ]
        )
        partitions[p] = PartitionHistory(
            tp, Manifest(topic="t", topic_id=topic_id, partition=p, segments=segments)
        )
    return Incarnation("t", topic_id, partitions)


OLD = "A" * 22
NEW = "B" * 22
OTHER = "C" * 22


def test_a_missing_topic_is_created_with_the_remote_partition_count() -> None:
    plan = plan_topic("t", _incarnation(OLD, {0: 9, 1: None, 2: 4}), None, [], 5, PlanOptions())
    assert (plan.create, plan.partitions, plan.replication_factor) == (True, 3, 3)
    assert plan_topic("t", _incarnation(OLD, {0: 9}), None, [], 2, PlanOptions()).replication_factor == 2
    assert plan_topic("t", _incarnation(OLD, {0: 9}), None, [], 2, PlanOptions(partitions=6)).partitions == 6


def test_impossible_sizes_are_refused() -> None:
    with pytest.raises(ConfigError, match="replication factor 4"):
        plan_topic("t", _incarnation(OLD, {0: 9}), None, [], 3, PlanOptions(replication_factor=4))
    with pytest.raises(ConfigError, match="below"):
        plan_topic("t", _incarnation(OLD, {0: 9, 1: 9}), None, [], 3, PlanOptions(partitions=1))


def test_a_foreign_non_empty_topic_is_refused_unless_allowed() -> None:
    live = LiveTopic(NEW, 1, records=5)
    with pytest.raises(ConfigError, match="refusing to mix"):
        plan_topic("t", _incarnation(OLD, {0: 9}), live, [], 1, PlanOptions())
    assert (
        plan_topic("t", _incarnation(OLD, {0: 9}), live, [], 1, PlanOptions(allow_non_empty=True)).create
        is False
    )
    assert plan_topic("t", _incarnation(OLD, {0: 9}), live, [], 1, PlanOptions(restore=False)).create is False


def test_an_empty_or_claimed_topic_is_reused() -> None:
    empty = plan_topic("t", _incarnation(OLD, {0: 9}), LiveTopic(NEW, 1, 0), [], 1, PlanOptions())
    assert (empty.create, empty.resume) == (False, False)
    claim = Claim(topic="t", source_topic_id=OLD, target_topic_id=NEW, partitions=1, created_at_ms=0)
    resumed = plan_topic("t", _incarnation(OLD, {0: 9}), LiveTopic(NEW, 1, 500), [claim], 1, PlanOptions())
    assert (resumed.create, resumed.resume) == (False, True)


def test_a_topic_holding_another_incarnations_history_is_refused() -> None:
    claim = Claim(topic="t", source_topic_id=OTHER, target_topic_id=NEW, partitions=1, created_at_ms=0)
    with pytest.raises(ConfigError, match=OTHER):
        plan_topic("t", _incarnation(OLD, {0: 9}), LiveTopic(NEW, 1, 0), [claim], 1, PlanOptions())


def test_the_live_incarnation_is_not_recovered() -> None:
    with pytest.raises(ConfigError, match="still exists"):
        plan_topic("t", _incarnation(OLD, {0: 9}), LiveTopic(OLD, 1, 10), [], 1, PlanOptions())


def test_a_smaller_live_topic_grows_only_when_asked() -> None:
    source = _incarnation(OLD, {0: 9, 1: 9, 2: 9})
    with pytest.raises(ConfigError, match="--partitions-from-remote"):
        plan_topic("t", source, LiveTopic(NEW, 2, 0), [], 1, PlanOptions())
    plan = plan_topic("t", source, LiveTopic(NEW, 2, 0), [], 1, PlanOptions(partitions_from_remote=True))
    assert plan.add_partitions_to == 3


def test_several_incarnations_need_an_explicit_choice() -> None:
    old, newer = _incarnation(OLD, {0: 9}, 1_000), _incarnation(OTHER, {0: 3}, 2_000)
    with pytest.raises(ConfigError, match="--topic-id") as err:
        choose_source([old, newer], topic="t", topic_id=None, live_topic_id=None, remote_url="file:///r")
    assert OLD in str(err.value) and OTHER in str(err.value) and "0..9" in str(err.value)
    assert choose_source([old, newer], topic="t", topic_id=OTHER, live_topic_id=None, remote_url="u") is newer
    # The live topic's own incarnation is not a candidate, so the deleted one is chosen alone.
    assert choose_source([old, newer], topic="t", topic_id=None, live_topic_id=OTHER, remote_url="u") is old
    with pytest.raises(ConfigError, match="no tiered data"):
        choose_source([], topic="t", topic_id=None, live_topic_id=None, remote_url="u")
    with pytest.raises(ConfigError, match="no incarnation with id"):
        choose_source([old], topic="t", topic_id=NEW, live_topic_id=None, remote_url="u")


def test_target_configs_that_would_lose_data_are_refused() -> None:
    now = 10_000_000
    with pytest.raises(ConfigError, match="LogAppendTime"):
        check_target_configs({"message.timestamp.type": "LogAppendTime"}, (1, 2), now)
    with pytest.raises(ConfigError, match="before.max.ms"):
        check_target_configs({"message.timestamp.before.max.ms": "1000"}, (now - 5000, now), now)
    with pytest.raises(ConfigError, match="after.max.ms"):
        check_target_configs({"message.timestamp.after.max.ms": "1000"}, (now, now + 5000), now)
    ok = {
        "message.timestamp.type": "CreateTime",
        "retention.ms": "-1",
        "message.timestamp.before.max.ms": str(2**63 - 1),
    }
    assert check_target_configs(ok, (0, now), now) == []


def test_retention_that_will_trim_restored_records_is_a_warning() -> None:
    warnings = check_target_configs({"retention.ms": "1000"}, (5_000, 9_500), 10_000)
    assert len(warnings) == 1 and "retention.ms=1000" in warnings[0]
