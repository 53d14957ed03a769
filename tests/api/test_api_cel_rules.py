"""Every cross-field rule's CEL text (what the API server enforces at admission) and its Python check
(what the operator and standalone mode enforce) agree on the same cases, evaluated with cel-python."""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from pydantic import BaseModel

from storage_core.api.parse import parse_spec
from storage_core.api.resources import (
    CopyPolicy,
    LogDirLocation,
    ReplicaFetchers,
    TableSpec,
    TableValueDecoding,
    TieredBrokerSpec,
    TieredTopicSpec,
)
from storage_core.api.rules import ApiModel, Rule
from storage_core.api.tiered_cluster import TieredClusterSpec
from storage_core.api.trim_hold import TrimHold

TOPIC = {"clusterRef": {"name": "c"}, "topic": "t"}
REMOTE = {"remote": {"url": "s3://bucket/tier"}}
BROKER = {
    "clusterRef": {"name": "c"},
    "brokerId": 4,
    "logDir": {"claimName": "d0", "mountPath": "/k/d0", "path": "/k/d0/kafka-log4"},
}
DIR1 = {"claimName": "d1", "mountPath": "/k/d1", "path": "/k/d1/kafka-log4"}

# (model, the object the rule sits on, valid?) - each rule has cases on both sides of it.
CASES: list[tuple[type[ApiModel], dict[str, Any], bool]] = [
    (TieredTopicSpec, {**TOPIC}, True),
    (TieredTopicSpec, {**TOPIC, "remoteRetentionMs": 3_600_000}, False),  # default local (1 day) > 1 h
    (TieredTopicSpec, {**TOPIC, "localRetentionMs": 1000, "remoteRetentionMs": 5000}, True),
    (TieredTopicSpec, {**TOPIC, "localRetentionMs": 5000, "remoteRetentionMs": 5000}, True),
    (TieredTopicSpec, {**TOPIC, "localRetentionMs": 5001, "remoteRetentionMs": 5000}, False),
    (TieredTopicSpec, {**TOPIC, "localRetentionMs": -1, "remoteRetentionMs": 5000}, False),
    (TieredTopicSpec, {**TOPIC, "localRetentionMs": -1, "remoteRetentionMs": -1}, True),
    (TieredTopicSpec, {**TOPIC, "localRetentionMs": -1}, True),
    (TieredTopicSpec, {**TOPIC, "remoteRetentionBytes": 1 << 30}, False),  # default local bytes: infinite
    (TieredTopicSpec, {**TOPIC, "localRetentionBytes": 1 << 20, "remoteRetentionBytes": 1 << 30}, True),
    (TieredTopicSpec, {**TOPIC, "localRetentionBytes": 1 << 31, "remoteRetentionBytes": 1 << 30}, False),
    (CopyPolicy, {}, True),
    (CopyPolicy, {"intervalSeconds": 60}, True),
    (CopyPolicy, {"schedule": "*/5 * * * *"}, True),
    (CopyPolicy, {"schedule": "*/5 * * * *", "intervalSeconds": 60}, False),
    (TableSpec, {"location": "s3://lake/t"}, True),
    (TableSpec, {"location": "s3://lake/t", "trigger": "Interval", "intervalSeconds": 600}, True),
    (TableSpec, {"location": "s3://lake/t", "trigger": "AfterCopy", "intervalSeconds": 600}, False),
    (TableSpec, {"location": "s3://lake/t", "intervalSeconds": 600}, False),
    (TableValueDecoding, {"format": "json"}, True),
    (TableValueDecoding, {"format": "avro", "schemaRegistryUrl": "http://registry:8081"}, True),
    (TableValueDecoding, {"format": "avro"}, False),
    (TableValueDecoding, {"format": "json", "schemaRegistryUrl": "http://registry:8081"}, False),
    (ReplicaFetchers, {}, True),
    (ReplicaFetchers, {"mode": "fixed"}, False),
    (ReplicaFetchers, {"mode": "fixed", "value": 4}, True),
    (ReplicaFetchers, {"mode": "fixed", "value": 4, "max": 8}, False),
    (ReplicaFetchers, {"mode": "fixed", "value": 4, "min": 2}, False),
    (ReplicaFetchers, {"mode": "auto", "value": 4}, False),
    (ReplicaFetchers, {"value": 4}, False),
    (ReplicaFetchers, {"min": 2, "max": 8}, True),
    (ReplicaFetchers, {"min": 6, "max": 3}, False),
    (ReplicaFetchers, {"min": 9}, False),  # default max is 8
    (ReplicaFetchers, {"mode": "auto", "min": 8, "max": 8}, True),
    (ReplicaFetchers, {"autoApprove": True}, True),
    (ReplicaFetchers, {"mode": "fixed", "value": 4, "autoApprove": True}, False),
    (ReplicaFetchers, {"mode": "fixed", "value": 4, "autoApprove": False}, True),
    (LogDirLocation, {"path": "/srv/kafka"}, True),
    (LogDirLocation, {"path": "/var/lib/kafka/data/kafka-log0", "claimName": "data-0"}, True),
    (LogDirLocation, {"path": "/srv/kafka", "claimName": "data-0"}, False),
    (LogDirLocation, {"path": "/mnt/logs/kafka", "claimName": "data-0", "mountPath": "/mnt/logs"}, True),
    (TieredBrokerSpec, {**BROKER}, True),
    (TieredBrokerSpec, {**BROKER, "extraLogDirs": [DIR1]}, True),
    (
        TieredBrokerSpec,
        {**BROKER, "extraLogDirs": [{**DIR1, "path": "/k/d0/kafka-log4", "mountPath": "/k"}]},
        False,
    ),
    (TieredBrokerSpec, {**BROKER, "extraLogDirs": [{"path": "/elsewhere"}]}, False),
    (
        TieredBrokerSpec,
        {**BROKER, "extraLogDirs": [{**DIR1, "mountPath": "/k/d0", "path": "/k/d0/x"}]},
        False,
    ),
    (TieredBrokerSpec, {**BROKER, "logDir": {"path": "/a"}, "extraLogDirs": [{"path": "/b"}]}, True),
    (TieredClusterSpec, {**REMOTE, "bootstrapServers": "kafka:9092"}, True),
    (TieredClusterSpec, {**REMOTE, "strimzi": {"kafka": "my-cluster"}}, True),
    (TieredClusterSpec, {**REMOTE, "bootstrapServers": "kafka:9092", "strimzi": {"kafka": "k"}}, True),
    (TieredClusterSpec, {**REMOTE}, False),
    (TrimHold, {}, True),
    (TrimHold, {"enabled": False}, True),
    (TrimHold, {"enabled": False, "maxAgeMs": 3_600_000}, False),  # a bound that would not apply
    (TrimHold, {"enabled": False, "ignoreGroups": []}, False),
    (TrimHold, {"enabled": True, "maxAgeMs": 3_600_000, "inactiveGroupMs": 0}, True),
    (TrimHold, {"maxAgeMs": 0}, False),  # holds nothing
    (TrimHold, {"maxBytes": 0}, False),
    (TrimHold, {"enabled": False, "maxBytes": 0}, False),
    (TrimHold, {"maxAgeMs": -1, "maxBytes": -1}, True),
    (TrimHold, {"maxBytes": 1 << 30}, True),
    (TrimHold, {"ignoreGroups": ["billing", "connect-*", "*"]}, True),
    (TrimHold, {"ignoreGroups": ["connect-*-sink"]}, False),
    (TrimHold, {"ignoreGroups": ["*-sink"]}, False),
    (TrimHold, {"ignoreGroups": ["**"]}, False),
    (TieredTopicSpec, {**TOPIC, "trimHold": {}}, True),  # the default 7 days outlast the default 1 day
    (TieredTopicSpec, {**TOPIC, "trimHold": {"maxAgeMs": 3_600_000}}, False),  # within the 1-day window
    (TieredTopicSpec, {**TOPIC, "localRetentionMs": 600_000, "trimHold": {"maxAgeMs": 3_600_000}}, True),
    (TieredTopicSpec, {**TOPIC, "localRetentionMs": 600_000, "trimHold": {"maxAgeMs": 600_000}}, False),
    (TieredTopicSpec, {**TOPIC, "trimHold": {"maxAgeMs": -1}}, True),
    (TieredTopicSpec, {**TOPIC, "trimHold": {"enabled": False}}, True),
    (
        TieredTopicSpec,
        {**TOPIC, "localRetentionMs": -1, "remoteRetentionMs": -1, "trimHold": {"maxAgeMs": 1000}},
        True,
    ),
]


def all_rules() -> list[tuple[type[ApiModel], Rule]]:
    seen: list[tuple[type[ApiModel], Rule]] = []
    pending: list[type[BaseModel]] = [TieredTopicSpec, ReplicaFetchers, LogDirLocation, CopyPolicy]
    from storage_core.api.cluster import KafkaClusterConfig

    pending += [TieredBrokerSpec, KafkaClusterConfig, TieredClusterSpec]
    visited: set[type[BaseModel]] = set()
    while pending:
        model = pending.pop()
        if model in visited:
            continue
        visited.add(model)
        seen += [(model, rule) for rule in getattr(model, "RULES", ())]  # type: ignore[misc]
        for info in model.model_fields.values():
            for candidate in (info.annotation, *getattr(info.annotation, "__args__", ())):
                if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                    pending.append(candidate)
    return seen


def cel_valid(rule: Rule, obj: dict[str, Any]) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(rule.cel))
    return bool(program.evaluate(celpy.json_to_cel({"self": obj})))


def python_problem(model: type[ApiModel], obj: dict[str, Any]) -> str | None:
    return parse_spec(model, obj).problem


@pytest.mark.parametrize(("model", "obj", "valid"), CASES, ids=lambda v: getattr(v, "__name__", None))
def test_cel_and_python_agree(model: type[ApiModel], obj: dict[str, Any], valid: bool) -> None:
    cel = all(cel_valid(rule, obj) for rule in model.RULES)
    problem = python_problem(model, obj)
    assert cel == valid, f"CEL says {cel} for {obj}"
    assert (problem is None) == valid, problem
    if not valid:
        broken = [rule.message for rule in model.RULES if not cel_valid(rule, obj)]
        assert any(message in (problem or "") for message in broken), (problem, broken)


def test_every_rule_is_exercised_both_ways() -> None:
    for model, rule in all_rules():
        outcomes = {cel_valid(rule, obj) for m, obj, _ in CASES if m is model}
        assert outcomes == {True, False}, f"{model.__name__}: {rule.message} lacks a passing or failing case"


def test_trim_hold_ignore_groups_are_distinct() -> None:
    """The API server refuses a repeated group itself (list type set); standalone manifests are told too."""
    assert TrimHold.model_json_schema()["properties"]["ignoreGroups"]["x-kubernetes-list-type"] == "set"
    problem = python_problem(TrimHold, {"ignoreGroups": ["billing", "audit", "billing"]})
    assert problem is not None and "ignoreGroups lists billing more than once" in problem


def test_a_topic_without_trim_hold_takes_the_clusters() -> None:
    from storage_core.api.cluster import KafkaClusterConfig

    cluster = KafkaClusterConfig.model_validate(
        {**REMOTE, "name": "c", "bootstrapServers": "k:9092", "trimHold": {"maxAgeMs": 10_000_000}}
    )
    assert cluster.trim_hold.max_age_ms == 10_000_000
    assert TieredTopicSpec.model_validate(TOPIC).trim_hold is None
    assert KafkaClusterConfig.model_validate(
        {**REMOTE, "name": "c", "bootstrapServers": "k:9092"}
    ).trim_hold == (TrimHold())


def test_rules_reach_the_crds() -> None:
    from tierkeeper_operator import crdgen

    text = "".join(crdgen.render_all().values())
    for _, rule in all_rules():
        assert rule.message.split(" (")[0] in text
