"""The status derived from a verdict: phase, message, observedGeneration and the Accepted condition."""

from __future__ import annotations

import datetime

from tierkeeper_operator.assessment import ACCEPTED_CONDITION, assess, status_after_assessment
from tierkeeper_operator.models import ResourceStatus, TieredTopicSpec

GOOD = {"kafkaCluster": {"bootstrapServers": "k:9092"}, "topic": "t", "remote": {"url": "memory://tier"}}
BAD = {**GOOD, "copy": {"intervalSeconds": -5}}
T0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=10)


def accepted(status: dict[str, object]) -> dict[str, object]:
    conditions = status["conditions"]
    assert isinstance(conditions, list)
    return next(c for c in conditions if c["type"] == ACCEPTED_CONDITION)


def test_valid_spec_is_accepted() -> None:
    status = status_after_assessment(
        assess(TieredTopicSpec, GOOD), generation=3, previous_conditions=[], now=T0
    )
    assert status["phase"] == "Accepted"
    assert status["observedGeneration"] == 3
    condition = accepted(status)
    assert condition["status"] == "True"
    assert condition["observedGeneration"] == 3
    assert condition["lastTransitionTime"] == "2026-01-02T03:04:05Z"


def test_invalid_spec_message_is_the_problem() -> None:
    verdict = assess(TieredTopicSpec, BAD)
    status = status_after_assessment(verdict, generation=1, previous_conditions=[], now=T0)
    assert status["phase"] == "Invalid"
    assert status["message"] == verdict.problem
    assert accepted(status)["reason"] == "InvalidSpec"


def test_status_matches_the_status_model() -> None:
    status = status_after_assessment(
        assess(TieredTopicSpec, BAD), generation=None, previous_conditions=[], now=T0
    )
    assert ResourceStatus.model_validate(status).model_dump(by_alias=True, mode="json") == status


def test_transition_time_moves_only_when_the_status_flips() -> None:
    first = status_after_assessment(assess(TieredTopicSpec, GOOD), 1, [], T0)
    same = status_after_assessment(assess(TieredTopicSpec, GOOD), 2, first["conditions"], T1)
    assert accepted(same)["lastTransitionTime"] == accepted(first)["lastTransitionTime"]
    flipped = status_after_assessment(assess(TieredTopicSpec, BAD), 3, same["conditions"], T1)
    assert accepted(flipped)["lastTransitionTime"] == "2026-01-02T03:14:05Z"


def test_conditions_of_other_types_are_kept() -> None:
    foreign = {"type": "Copied", "status": "True", "reason": "Done", "lastTransitionTime": "x", "extra": 1}
    status = status_after_assessment(assess(TieredTopicSpec, GOOD), 1, [foreign], T0)
    assert foreign in status["conditions"]
    assert len(status["conditions"]) == 2
