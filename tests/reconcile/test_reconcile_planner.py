"""The pure planner: refusals, per-broker copy rounds, cleanup intervals, at most one run per broker/topic,
and kstatus conditions that scheduled rounds do not flap."""

from __future__ import annotations

import datetime
from dataclasses import replace
from typing import Any

import pytest

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.errors import ConfigError, TierkeeperError
from storage_core.reconcile import outcomes
from storage_core.reconcile.conditions import FAILURES_BEFORE_STALLED
from storage_core.reconcile.observed import (
    BrokerInput,
    ClientConfigProblem,
    KafkaTopic,
    PartitionLeader,
    RunningWork,
    TopicInput,
    kafka_problem,
)
from storage_core.reconcile.outcomes import RunEnd
from storage_core.reconcile.planner import plan

T0 = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)
CLUSTERS = {
    "c": KafkaClusterConfig.model_validate(
        {"name": "c", "bootstrapServers": "k:9092", "remote": {"url": "memory://tier"}}
    )
}


def topic(
    name: str = "orders",
    spec: dict[str, Any] | None = None,
    leaders: tuple[int | None, ...] = (1, 2, 3, 1),
    configs: dict[str, str] | None = None,
    status: TieredTopicStatus | None = None,
    exists: bool = True,
) -> TopicInput:
    raw = {"clusterRef": {"name": "c"}, "topic": name, **(spec or {})}
    kafka = (
        KafkaTopic(
            name,
            "id-" + name,
            configs if configs is not None else {"cleanup.policy": "delete", "retention.ms": "-1"},
            tuple(PartitionLeader(p, b) for p, b in enumerate(leaders)),
        )
        if exists
        else None
    )
    return TopicInput(
        f"ns/{name}", 1, TieredTopicSpec.model_validate(raw), None, status or TieredTopicStatus(), kafka
    )


def broker(broker_id: int, paused: bool = False) -> BrokerInput:
    spec = TieredBrokerSpec.model_validate(
        {
            "clusterRef": {"name": "c"},
            "brokerId": broker_id,
            "logDir": {"path": f"/b{broker_id}"},
            "paused": paused,
        }
    )
    return BrokerInput(f"ns/b{broker_id}", 1, spec, None, TieredBrokerStatus())


BROKERS = [broker(1), broker(2), broker(3)]


def conditions(status: TieredTopicStatus) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in status.conditions}


def test_one_copy_per_broker_covering_the_partitions_it_leads_over_all_topics() -> None:
    result = plan(CLUSTERS, [topic("a"), topic("b", leaders=(2, 3))], BROKERS, RunningWork(), T0)
    by_broker = {c.broker_id: {w.topic: w.partitions for w in c.work} for c in result.copies}
    assert by_broker == {1: {"a": (0, 3)}, 2: {"a": (1,), "b": (0,)}, 3: {"a": (2,), "b": (1,)}}
    assert result.cleanups == []  # nothing is tiered yet; cleanup follows the first copy round
    assert conditions(result.topic_status["ns/a"]) == {
        "Ready": ("False", "FirstCopyPending"),
        "Reconciling": ("True", "FirstCopyPending"),
    }


def test_no_second_copy_for_a_busy_broker_nor_second_cleanup() -> None:
    copied = outcomes.topic_after_copy(TieredTopicStatus(), [copy_result(p) for p in range(4)], RunEnd(T0))
    later = T0 + datetime.timedelta(minutes=10)
    assert [
        c.topic for c in plan(CLUSTERS, [topic(status=copied)], BROKERS, RunningWork(), later).cleanups
    ] == ["orders"]
    running = RunningWork(copy_brokers=frozenset({("c", 2)}), cleanup_topics=frozenset({"ns/orders"}))
    result = plan(CLUSTERS, [topic(status=copied)], BROKERS, running, later)
    assert sorted(c.broker_id for c in result.copies) == [1, 3]
    assert result.cleanups == []


def test_the_first_cleanup_waits_for_every_leaders_first_copy() -> None:
    """lastCopy is set by the first copy Job recorded: a first cleanup then would trim only behind that
    broker's partitions and wait its whole interval before trimming the others."""
    one_broker = outcomes.topic_after_copy(TieredTopicStatus(), [copy_result(0), copy_result(3)], RunEnd(T0))
    still = RunningWork(copy_brokers=frozenset({("c", 2), ("c", 3)}))
    waiting = plan(CLUSTERS, [topic(status=one_broker)], BROKERS, still, T0)
    assert waiting.cleanups == []
    other_topics = RunningWork(copy_brokers=frozenset({("c", 9)}))
    assert [
        c.topic for c in plan(CLUSTERS, [topic(status=one_broker)], BROKERS, other_topics, T0).cleanups
    ] == ["orders"]
    # After the first cleanup, a copy in progress no longer holds one back (it would starve on a busy broker).
    cleaned = outcomes.topic_after_cleanup(
        one_broker, {"partitions": [], "errors": [], "bytes_deleted": 0}, RunEnd(T0)
    )
    later = T0 + datetime.timedelta(hours=2)
    assert [c.topic for c in plan(CLUSTERS, [topic(status=cleaned)], BROKERS, still, later).cleanups] == [
        "orders"
    ]


@pytest.mark.parametrize(
    ("configs", "reason", "words"),
    [
        ({"cleanup.policy": "compact"}, "CompactedTopic", "cleanup.policy=compact"),
        ({"cleanup.policy": "delete,compact"}, "CompactedTopic", "log cleaner"),
        (
            {"cleanup.policy": "delete", "remote.storage.enable": "true"},
            "KafkaTieringEnabled",
            "remote.storage.enable=true",
        ),
        ({}, "TopicConfigsUnknown", "no cleanup.policy"),
        (  # shorter than the local window (1 day by default) + copy interval + margin
            {"cleanup.policy": "delete", "retention.ms": "3600000"},
            "KafkaRetentionTooShort",
            "retention.ms=3600000",
        ),
        (
            {"cleanup.policy": "delete", "retention.bytes": "1073741824"},
            "KafkaRetentionTooShort",
            "retention.bytes=1073741824",
        ),
    ],
)
def test_unsafe_topics_are_stalled_and_never_copied(configs: dict[str, str], reason: str, words: str) -> None:
    result = plan(CLUSTERS, [topic(configs=configs)], BROKERS, RunningWork(), T0)
    status = result.topic_status["ns/orders"]
    assert result.copies == [] and result.cleanups == []
    assert conditions(status) == {"Ready": ("False", reason), "Stalled": ("True", reason)}
    assert words in status.message
    assert [(e.type, e.reason) for e in result.events] == [("Warning", reason)]


def test_kafka_retention_at_least_the_remote_retention_is_fine() -> None:
    spec = {"localRetentionMs": 3_600_000, "remoteRetentionMs": 86_400_000}
    result = plan(
        CLUSTERS,
        [topic(spec=spec, configs={"cleanup.policy": "delete", "retention.ms": "86400000"})],
        BROKERS,
        RunningWork(),
        T0,
    )
    assert "Stalled" not in conditions(result.topic_status["ns/orders"])
    assert len(result.copies) == 3


DAILY = {"localRetentionMs": 3_600_000, "copy": {"schedule": "0 3 * * *"}}


@pytest.mark.parametrize(
    ("spec", "retention_ms", "stalled"),
    [
        # With a local window, Kafka's retention needs only the headroom above it (the trim comes first).
        ({"localRetentionMs": 3_600_000}, 3_600_000 + 300_000 + 3_600_000, False),
        ({"localRetentionMs": 3_600_000}, 3_600_000 + 300_000 + 3_600_000 - 1, True),
        # No local window on time: Kafka's retention deletes, so it must be at least the remote one.
        ({"localRetentionMs": -1, "remoteRetentionMs": -1}, 604_800_000, True),
        ({"localRetentionMs": -1, "remoteRetentionMs": -1}, -1, False),
        # A daily schedule: the copy interval assumed is the longest gap between runs (a day).
        ({"localRetentionMs": 3_600_000, "copy": {"schedule": "0 3 * * *"}}, 3_600_000 + 7_200_000, True),
        (
            {"localRetentionMs": 3_600_000, "copy": {"schedule": "0 3 * * *"}},
            2 * 3_600_000 + 86_400_000,
            False,
        ),
    ],
)
def test_one_retention_rule_with_the_cleanup_jobs(
    spec: dict[str, Any], retention_ms: int, stalled: bool
) -> None:
    """The planner asks tiering.eligibility.local_trim_refusal, the rule cleanup applies, with the topic's
    windows, remote retention and copy interval."""
    configs = {"cleanup.policy": "delete", "retention.ms": str(retention_ms)}
    result = plan(CLUSTERS, [topic(spec=spec, configs=configs)], BROKERS, RunningWork(), T0)
    assert ("Stalled" in conditions(result.topic_status["ns/orders"])) is stalled, result.topic_status


def test_missing_topic_unknown_cluster_and_untiered_leader_are_stalled() -> None:
    missing = topic(exists=False)
    elsewhere = replace(
        topic("x"), spec=TieredTopicSpec.model_validate({"clusterRef": {"name": "z"}, "topic": "x"})
    )
    result = plan(CLUSTERS, [missing, elsewhere, topic("y", leaders=(4,))], BROKERS, RunningWork(), T0)
    reasons = {key: conditions(s)["Stalled"][1] for key, s in result.topic_status.items()}
    assert reasons == {"ns/orders": "TopicNotFound", "ns/x": "ClusterNotFound", "ns/y": "BrokerNotTiered"}
    assert "broker 4 (leads 0)" in result.topic_status["ns/y"].message
    assert result.copies == []


def test_paused_topic_and_paused_broker() -> None:
    result = plan(CLUSTERS, [topic(spec={"paused": True})], BROKERS, RunningWork(), T0)
    assert result.copies == [] and result.cleanups == []
    assert conditions(result.topic_status["ns/orders"]) == {"Ready": ("True", "Paused")}
    result = plan(CLUSTERS, [topic()], [broker(1, paused=True), broker(2), broker(3)], RunningWork(), T0)
    assert "BrokerNotTiered" in str(conditions(result.topic_status["ns/orders"]))


def copy_result(partition: int, **extra: Any) -> dict[str, Any]:
    return {
        "topic": "orders",
        "partition": partition,
        "topic_id": "id-orders",
        "copied_segments": 2,
        "copied_bytes": 200,
        "remote_start_offset": 0,
        "remote_end_offset": 99,
        "remote_segments": 2,
        "remote_bytes": 200,
        "untiered_segments": 1,
        "untiered_bytes": 50,
        "error": None,
        **extra,
    }


def test_scheduled_rounds_do_not_flap_ready_or_reconciling() -> None:
    first = plan(CLUSTERS, [topic()], BROKERS, RunningWork(), T0).topic_status["ns/orders"]
    done = outcomes.topic_after_copy(first, [copy_result(p) for p in range(4)], RunEnd(T0))
    ready = plan(CLUSTERS, [topic(status=done)], BROKERS, RunningWork(), T0).topic_status["ns/orders"]
    assert conditions(ready) == {"Ready": ("True", "Tiering")}
    assert ready.remote is not None and ready.remote.segments == 8 and ready.remote.bytes == 800
    assert ready.copy_lag is not None and ready.copy_lag.bytes == 200
    transition = ready.conditions[0].last_transition_time
    later = T0 + datetime.timedelta(minutes=5)
    # The next round is due, and it runs (Jobs in progress) without the conditions moving.
    due = plan(CLUSTERS, [topic(status=ready)], BROKERS, RunningWork(), later)
    assert len(due.copies) == 3
    running = RunningWork(copy_brokers=frozenset({("c", 1), ("c", 2), ("c", 3)}))
    during = plan(CLUSTERS, [topic(status=ready)], BROKERS, running, later).topic_status["ns/orders"]
    assert conditions(during) == {"Ready": ("True", "Tiering")}
    assert during.conditions[0].last_transition_time == transition


def test_interval_and_schedule_decide_when_copies_are_due() -> None:
    done = outcomes.topic_after_copy(TieredTopicStatus(), [copy_result(p) for p in range(4)], RunEnd(T0))
    soon = T0 + datetime.timedelta(seconds=299)
    assert plan(CLUSTERS, [topic(status=done)], BROKERS, RunningWork(), soon).copies == []
    hourly = topic(spec={"copy": {"schedule": "0 * * * *"}}, status=done)
    assert plan(CLUSTERS, [hourly], BROKERS, RunningWork(), T0 + datetime.timedelta(minutes=59)).copies == []
    assert (
        len(plan(CLUSTERS, [hourly], BROKERS, RunningWork(), T0 + datetime.timedelta(minutes=60)).copies) == 3
    )


def test_the_plan_says_when_the_next_copy_or_cleanup_falls_due() -> None:
    """``next_due``: the earliest copy or cleanup after now, for the round runner to come back then."""
    copied = outcomes.topic_after_copy(TieredTopicStatus(), [copy_result(p) for p in range(4)], RunEnd(T0))
    minute = datetime.timedelta(minutes=1)
    # Copied at T0 (interval 300 s); its first cleanup is due at once, so only the copy is ahead.
    result = plan(CLUSTERS, [topic(status=copied)], BROKERS, RunningWork(), T0 + minute)
    assert [c.topic for c in result.cleanups] == ["orders"]
    assert result.next_due == T0 + datetime.timedelta(seconds=300)
    # Cleaned up two minutes after the copy: the copy (T0 + 300 s) still comes before the next cleanup.
    cleaned = outcomes.topic_after_cleanup(copied, {"deleted_segments": 0}, RunEnd(T0 + 2 * minute))
    result = plan(CLUSTERS, [topic(status=cleaned, spec={"cleanup": {"intervalSeconds": 600}})], BROKERS,
                  RunningWork(), T0 + 3 * minute)  # fmt: skip
    assert result.copies == [] and result.cleanups == []
    assert result.next_due == T0 + datetime.timedelta(seconds=300)
    # A copy every 10 minutes and a cleanup every 60 s: the cleanup comes first.
    faster = topic(
        status=cleaned, spec={"copy": {"intervalSeconds": 600}, "cleanup": {"intervalSeconds": 60}}
    )
    result = plan(
        CLUSTERS, [faster], BROKERS, RunningWork(), T0 + 2 * minute + datetime.timedelta(seconds=30)
    )
    assert result.next_due == T0 + 3 * minute
    # A scheduled copy falls due at the schedule's next minute, when that is within the look-ahead.
    hourly = topic(spec={"copy": {"schedule": "0 * * * *"}, "cleanup": {"intervalSeconds": 7200}},
                   status=cleaned)  # fmt: skip
    result = plan(CLUSTERS, [hourly], BROKERS, RunningWork(), T0 + datetime.timedelta(minutes=59, seconds=10))
    assert result.next_due == T0 + datetime.timedelta(hours=1)
    # Past the look-ahead the scheduled copy is not counted; the cleanup (every two hours) is.
    later = plan(CLUSTERS, [hourly], BROKERS, RunningWork(), T0 + 10 * minute).next_due
    assert later == T0 + 2 * minute + datetime.timedelta(hours=2)
    # Work already due is in this plan, not ahead of it; a busy topic's work waits for its Job.
    due = plan(CLUSTERS, [topic(status=cleaned)], BROKERS, RunningWork(), T0 + datetime.timedelta(hours=1))
    assert len(due.copies) == 3 and due.next_due is None


def test_failed_copies_are_retried_then_stalled_past_the_bound_until_a_round_succeeds() -> None:
    """kstatus: a failed copy is passing trouble (Ready=False, Reconciling, same reason and message, no
    Warning about stalling) until FAILURES_BEFORE_STALLED failed in a row; then Stalled, until one
    succeeds. The copies keep being planned at the copy interval either way."""
    status = TieredTopicStatus()
    seen = []
    for _ in range(FAILURES_BEFORE_STALLED):
        failed = outcomes.topic_after_copy(
            status, [copy_result(0, error="orders-0: object store unreachable")], RunEnd(T0)
        )
        result = plan(CLUSTERS, [topic(status=failed)], BROKERS, RunningWork(), T0)
        status = result.topic_status["ns/orders"]
        assert result.next_due == T0 + datetime.timedelta(minutes=5)  # retried at the copy interval
        seen.append((conditions(status), [e.reason for e in result.events]))
        assert "object store unreachable" in status.message
        assert {c.message for c in status.conditions} == {status.message}
    retrying = {"Ready": ("False", "CopyFailed"), "Reconciling": ("True", "CopyFailed")}
    stalled = {"Ready": ("False", "CopyFailed"), "Stalled": ("True", "CopyFailed")}
    assert seen == [(retrying, []), (retrying, []), (stalled, ["CopyFailed"])]
    assert "(3 in a row)" in status.message
    healed = outcomes.topic_after_copy(status, [copy_result(p) for p in range(4)], RunEnd(T0))
    assert healed.last_copy is not None and healed.last_copy.failures_in_a_row == 0
    after = plan(CLUSTERS, [topic(status=healed)], BROKERS, RunningWork(), T0).topic_status["ns/orders"]
    assert conditions(after) == {"Ready": ("True", "Tiering")}
    # After a success the count starts again: one failure is retried, not Stalled.
    again = outcomes.topic_after_copy(healed, [], RunEnd(T0, failure="Job deadline exceeded"))
    assert again.last_copy is not None and again.last_copy.failures_in_a_row == 1
    retried = plan(CLUSTERS, [topic(status=again)], BROKERS, RunningWork(), T0).topic_status["ns/orders"]
    assert conditions(retried) == retrying


def test_failed_cleanups_and_broker_copies_follow_the_same_bound() -> None:
    done = outcomes.topic_after_copy(TieredTopicStatus(), [copy_result(p) for p in range(4)], RunEnd(T0))
    cleanup, broker_status = done, TieredBrokerStatus()
    verdicts = []
    for _ in range(FAILURES_BEFORE_STALLED):
        cleanup = outcomes.topic_after_cleanup(
            cleanup, {"errors": ["DeleteRecords: not authorized"]}, RunEnd(T0)
        )
        broker_status = outcomes.broker_after_copy(broker_status, [], RunEnd(T0, failure="pod evicted"))
        failing = replace(broker(1), status=broker_status)
        result = plan(CLUSTERS, [topic(status=cleanup)], [failing, *BROKERS[1:]], RunningWork(), T0)
        verdicts.append(
            (conditions(result.topic_status["ns/orders"]), conditions(result.broker_status["ns/b1"]))
        )
    first, _, last = verdicts
    assert first == (
        {"Ready": ("False", "CleanupFailed"), "Reconciling": ("True", "CleanupFailed")},
        {"Ready": ("False", "CopyFailed"), "Reconciling": ("True", "CopyFailed")},
    )
    assert last == (
        {"Ready": ("False", "CleanupFailed"), "Stalled": ("True", "CleanupFailed")},
        {"Ready": ("False", "CopyFailed"), "Stalled": ("True", "CopyFailed")},
    )


def test_kafka_unreachable_is_retried_but_an_unreadable_client_config_needs_a_person() -> None:
    down = replace(topic(), kafka=None, kafka_error="k:9092: timed out")
    secret = replace(
        topic(), kafka=None, kafka_error=kafka_problem(ConfigError("directory /x: not a directory"))
    )
    result = plan(CLUSTERS, [down], BROKERS, RunningWork(), T0)
    status = result.topic_status["ns/orders"]
    assert conditions(status) == {
        "Ready": ("False", "KafkaUnreachable"),
        "Reconciling": ("True", "KafkaUnreachable"),
    }
    assert status.message == "k:9092: timed out" and result.copies == []
    # A Warning Event when it starts (kubectl describe shows it), not one every round while it lasts.
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "KafkaUnreachable")]
    again = plan(CLUSTERS, [replace(down, status=status)], BROKERS, RunningWork(), T0)
    assert again.events == []
    result = plan(CLUSTERS, [secret], BROKERS, RunningWork(), T0)
    status = result.topic_status["ns/orders"]
    reason = "KafkaClientConfigInvalid"
    assert conditions(status) == {"Ready": ("False", reason), "Stalled": ("True", reason)}
    assert status.message == "directory /x: not a directory"
    assert [(e.type, e.reason) for e in result.events] == [("Warning", reason)]
    # Any other error of ours (the client refused to connect) is retried like an unreachable Kafka.
    assert not isinstance(kafka_problem(TierkeeperError("refused")), ClientConfigProblem)


def test_cleanup_outcome_moves_the_remote_start() -> None:
    done = outcomes.topic_after_copy(TieredTopicStatus(), [copy_result(0)], RunEnd(T0))
    report = {
        "partitions": [{"partition": 0, "deleted": [{}], "bytes_deleted": 100, "remote_start_offset": 50}],
        "errors": [],
        "bytes_deleted": 100,
    }
    after = outcomes.topic_after_cleanup(done, report, RunEnd(T0))
    assert after.remote is not None and after.remote.partitions[0].start_offset == 50
    assert after.remote.segments == 1 and after.remote.bytes == 100
    assert after.last_cleanup is not None and after.last_cleanup.result == "Succeeded"


def test_an_empty_topic_is_ready_with_no_copy_until_it_holds_records() -> None:
    """No record on any partition: checked, tierable, nothing to copy, so Ready at once and no copy work
    (10,000 new topics are not 10,000 partitions of empty copy Jobs); with records, the first copy runs."""
    empty = replace(topic(), kafka=replace(topic().kafka, empty=True))  # type: ignore[arg-type]
    result = plan(CLUSTERS, [empty], BROKERS, RunningWork(), T0)
    status = result.topic_status["ns/orders"]
    assert conditions(status) == {"Ready": ("True", "Empty")}
    assert "nothing to tier" in status.message
    assert result.copies == [] and result.cleanups == []
    filled = plan(CLUSTERS, [topic()], BROKERS, RunningWork(), T0)
    assert len(filled.copies) == 3 and "Reconciling" in conditions(filled.topic_status["ns/orders"])
