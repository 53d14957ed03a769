"""Every health the operator can write, built by the planner itself (not recorded by hand), read by the
real kstatus library and by the Argo CD script in real Lua: passing trouble is InProgress / Progressing,
only what needs a person (or a failure repeated past FAILURES_BEFORE_STALLED) is Failed / Degraded.

Argo CD cannot run here; its script runs in a Lua 5.1 with the libraries Argo CD opens (argocd_lua).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import yaml
from gitops_cases import HEALTH_SCRIPT, recorded_objects

from harness.argocd_lua import run_health
from harness.kstatus import kstatus_of
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import FetcherStatus, RebuildStatus, TieredBrokerStatus, TieredTopicStatus
from storage_core.errors import ConfigError
from storage_core.reconcile import outcomes
from storage_core.reconcile.conditions import FAILURES_BEFORE_STALLED
from storage_core.reconcile.fetchers import broker_conditions, health_of
from storage_core.reconcile.observed import (
    BrokerInput,
    KafkaTopic,
    PartitionLeader,
    RunningWork,
    TopicInput,
    kafka_problem,
)
from storage_core.reconcile.outcomes import RunEnd
from storage_core.reconcile.planner import plan
from storage_core.reconcile.rebuild import with_rebuild

T0 = datetime.datetime(2026, 11, 23, 8, 40, tzinfo=datetime.UTC)
CLUSTERS = {
    "c": KafkaClusterConfig.model_validate(
        {"name": "c", "bootstrapServers": "k:9092", "remote": {"url": "memory://tier"}}
    )
}
SAFE = {"cleanup.policy": "delete", "retention.ms": "-1"}


def _topic(status: TieredTopicStatus | None = None, **change: Any) -> TopicInput:
    spec = TieredTopicSpec.model_validate({"clusterRef": {"name": "c"}, "topic": "orders"})
    kafka = KafkaTopic("orders", "id-orders", SAFE, (PartitionLeader(0, 1),))
    return replace(TopicInput("ns/orders", 1, spec, None, status or TieredTopicStatus(), kafka), **change)


def _broker(status: TieredBrokerStatus | None = None, **spec: Any) -> BrokerInput:
    parsed = TieredBrokerSpec.model_validate(
        {"clusterRef": {"name": "c"}, "brokerId": 1, "logDir": {"path": "/b1"}, **spec}
    )
    return BrokerInput("ns/b1", 1, parsed, None, status or TieredBrokerStatus())


def _copies_failed(times: int) -> TieredTopicStatus:
    status = TieredTopicStatus()
    for _ in range(times):
        status = outcomes.topic_after_copy(status, [], RunEnd(T0, failure="Job deadline exceeded"))
    return status


def _cleanups_failed(times: int) -> TieredTopicStatus:
    status = outcomes.topic_after_copy(TieredTopicStatus(), [], RunEnd(T0))
    for _ in range(times):
        status = outcomes.topic_after_cleanup(
            status, {"errors": ["DeleteRecords: not authorized"]}, RunEnd(T0)
        )
    return status


def _broker_copies_failed(times: int) -> TieredBrokerStatus:
    status = TieredBrokerStatus()
    for _ in range(times):
        status = outcomes.broker_after_copy(status, [], RunEnd(T0, failure="pod evicted"))
    return status


def topic_state(topic: TopicInput) -> TieredTopicStatus:
    return plan(CLUSTERS, [topic], [_broker()], RunningWork(), T0).topic_status["ns/orders"]


def broker_state(broker: BrokerInput, rebuild: RebuildStatus | None = None) -> TieredBrokerStatus:
    status = plan(CLUSTERS, [], [broker], RunningWork(), T0).broker_status["ns/b1"]
    if rebuild is None:
        return status
    return with_rebuild(status, rebuild, broker.status.conditions, broker.generation, T0)


def fetcher_state(phase: str) -> TieredBrokerStatus:
    """The broker's status as the fetcher part of a round writes it (``broker_conditions``)."""
    status = broker_state(_broker())
    fetchers = FetcherStatus.model_validate({"phase": phase, "mode": "auto", "message": f"fetchers {phase}"})
    conditions = broker_conditions(health_of(status), fetchers, 1, [], T0)
    ready = next(c for c in conditions if c.type == "Ready")
    return status.model_copy(
        update={"fetchers": fetchers, "conditions": conditions, "message": ready.message}
    )


def _rebuild(phase: str) -> RebuildStatus:
    return RebuildStatus.model_validate({"phase": phase, "source": "Job", "message": f"rebuild {phase}"})


RETRIED = ("InProgress", "Progressing")
FAILED = ("Failed", "Degraded")
CURRENT = ("Current", "Healthy")
RETRYING = FAILURES_BEFORE_STALLED - 1

# (kind, what, expected reason, (kstatus, Argo CD), the status the planner writes)
STATES: list[tuple[str, str, str, tuple[str, str], Callable[[], Any]]] = [
    ("TieredTopic", "first copy pending", "FirstCopyPending", RETRIED, lambda: topic_state(_topic())),
    (
        "TieredTopic",
        "Kafka unreachable",
        "KafkaUnreachable",
        RETRIED,
        lambda: topic_state(_topic(kafka=None, kafka_error="k:9092: timed out")),
    ),
    (
        "TieredTopic",
        "copy failed once",
        "CopyFailed",
        RETRIED,
        lambda: topic_state(_topic(_copies_failed(1))),
    ),
    (
        "TieredTopic",
        "copy failed just below the bound",
        "CopyFailed",
        RETRIED,
        lambda: topic_state(_topic(_copies_failed(RETRYING))),
    ),
    (
        "TieredTopic",
        "copy failed up to the bound",
        "CopyFailed",
        FAILED,
        lambda: topic_state(_topic(_copies_failed(FAILURES_BEFORE_STALLED))),
    ),
    (
        "TieredTopic",
        "cleanup failed once",
        "CleanupFailed",
        RETRIED,
        lambda: topic_state(_topic(_cleanups_failed(1))),
    ),
    (
        "TieredTopic",
        "cleanup failed up to the bound",
        "CleanupFailed",
        FAILED,
        lambda: topic_state(_topic(_cleanups_failed(FAILURES_BEFORE_STALLED))),
    ),
    (
        "TieredTopic",
        "client config not mounted",
        "KafkaClientConfigInvalid",
        FAILED,
        lambda: topic_state(_topic(kafka=None, kafka_error=kafka_problem(ConfigError("not a directory")))),
    ),
    ("TieredTopic", "topic missing", "TopicNotFound", FAILED, lambda: topic_state(_topic(kafka=None))),
    (
        "TieredTopic",
        "compacted topic",
        "CompactedTopic",
        FAILED,
        lambda: topic_state(
            _topic(kafka=KafkaTopic("orders", "id", {"cleanup.policy": "compact"}, (PartitionLeader(0, 1),)))
        ),
    ),
    (
        "TieredTopic",
        "tiering",
        "Tiering",
        CURRENT,
        lambda: topic_state(_topic(outcomes.topic_after_copy(TieredTopicStatus(), [], RunEnd(T0)))),
    ),
    ("TieredBroker", "ready", "Ready", CURRENT, lambda: broker_state(_broker())),
    (
        "TieredBroker",
        "copy failed once",
        "CopyFailed",
        RETRIED,
        lambda: broker_state(_broker(_broker_copies_failed(1))),
    ),
    (
        "TieredBroker",
        "copy failed up to the bound",
        "CopyFailed",
        FAILED,
        lambda: broker_state(_broker(_broker_copies_failed(FAILURES_BEFORE_STALLED))),
    ),
    (
        "TieredBroker",
        "rebuild running",
        "Rebuilding",
        RETRIED,
        lambda: broker_state(_broker(), _rebuild("Running")),
    ),
    (
        "TieredBroker",
        "rebuild blocked by a pod",
        "RebuildBlocked",
        RETRIED,
        lambda: broker_state(_broker(), _rebuild("Blocked")),
    ),
    (
        "TieredBroker",
        "rebuild failed (one-shot: a person requests it again)",
        "RebuildFailed",
        FAILED,
        lambda: broker_state(_broker(), _rebuild("Failed")),
    ),
    # A proposal waiting for a person holds no waiter: Current / Healthy (FetcherChangePending=True).
    ("TieredBroker", "fetcher proposal pending", "Ready", CURRENT, lambda: fetcher_state("ProposalReady")),
    (
        "TieredBroker",
        "fetcher change applying",
        "FetcherChangeApplying",
        RETRIED,
        lambda: fetcher_state("Applying"),
    ),
    (
        "TieredBroker",
        "fetcher change failed (a person refreshes)",
        "FetcherChangeFailed",
        FAILED,
        lambda: fetcher_state("Failed"),
    ),
]


def as_object(kind: str, status: Any) -> dict[str, Any]:
    """The recorded Ready object of ``kind`` with the planner's status, as the operator writes it."""
    obj: dict[str, Any] = yaml.safe_load((recorded_objects(kind) / "healthy_ready.yaml").read_text())
    obj["metadata"]["generation"] = 1
    obj["status"] = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    return obj


@pytest.mark.parametrize(("kind", "what", "reason", "expected", "build"), STATES, ids=[s[1] for s in STATES])
def test_planner_state_through_kstatus_and_argocd(
    kind: str, what: str, reason: str, expected: tuple[str, str], build: Callable[[], Any]
) -> None:
    obj = as_object(kind, build())
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conditions["Ready"]["reason"] == reason, conditions
    # kstatus's shape: Ready always; exactly one of Reconciling / Stalled while not Ready, with the
    # same reason and message.
    extra = {t for t in conditions if t in ("Reconciling", "Stalled")}
    if conditions["Ready"]["status"] == "False" or extra:
        (other,) = extra
        assert conditions[other]["reason"] == reason
        assert conditions[other]["message"] == conditions["Ready"]["message"] == obj["status"]["message"]
    (verdict,) = kstatus_of(yaml.safe_dump(obj))
    argo = run_health(HEALTH_SCRIPT, obj)
    assert (verdict.status, argo["status"]) == expected, (what, verdict, argo)
    if expected != CURRENT:
        assert verdict.message == argo["message"] == obj["status"]["message"], (verdict, argo)


def test_every_bound_state_is_counted_in_status() -> None:
    """The bound is visible to a person: the count sits in status.lastCopy / lastCleanup."""
    status = topic_state(_topic(_copies_failed(FAILURES_BEFORE_STALLED)))
    assert status.last_copy is not None and status.last_copy.failures_in_a_row == FAILURES_BEFORE_STALLED
    assert f"({FAILURES_BEFORE_STALLED} in a row)" in status.message
