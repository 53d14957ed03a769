"""TieredClusters decided (storage_core.reconcile.tiered_clusters): which are in effect beside the file
entries, who may name them, when the bucket is checked again, and the verdict's order."""

from __future__ import annotations

import datetime
from typing import Any

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import parse_spec
from storage_core.api.resources import TieredTopicSpec
from storage_core.api.tiered_cluster import BucketCheck, KafkaCheck, TieredClusterSpec, TieredClusterStatus
from storage_core.reconcile import tiered_clusters as decide

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
SPEC = {"bootstrapServers": "kafka:9092", "remote": {"url": "s3://bucket/tier"}}


def obj(
    namespace: str, name: str, spec: dict[str, Any], created: str = "1", **kw: Any
) -> decide.ClusterObject:
    return decide.ClusterObject(
        namespace=namespace,
        name=name,
        generation=1,
        created=created,
        spec=parse_spec(TieredClusterSpec, spec),
        status=TieredClusterStatus(),
        **kw,
    )


def file_entry(name: str, **overrides: Any) -> KafkaClusterConfig:
    return KafkaClusterConfig.model_validate({**SPEC, "name": name, **overrides})


def test_a_tiered_cluster_serves_its_namespace_and_file_entries_serve_all() -> None:
    where = decide.directory([obj("kafka", "main", SPEC)], {"shared": file_entry("shared")})
    assert set(where.clusters) == {"main", "shared"}
    assert where.member_problem("kafka", "main") is None
    assert where.member_problem("other", "shared") is None
    problem = where.member_problem("other", "main")
    assert problem is not None and "namespace kafka, not other" in problem
    topic = parse_spec(TieredTopicSpec, {"clusterRef": {"name": "main"}, "topic": "t"})
    assert decide.admitted("other", topic, where).problem == problem
    assert decide.admitted("kafka", topic, where) is topic
    assert where.member_problem("kafka", "unknown") is None  # the planner says ClusterNotFound itself


def test_same_name_same_settings_in_two_namespaces_and_beside_a_file_entry() -> None:
    where = decide.directory(
        [obj("a", "main", SPEC), obj("b", "main", SPEC, "2")], {"main": file_entry("main")}
    )
    assert where.refused == {}
    assert where.namespaces["main"] == {"a", "b"}


def test_other_settings_under_one_name_are_refused_the_file_entry_wins() -> None:
    other = {**SPEC, "bootstrapServers": "elsewhere:9092"}
    where = decide.directory([obj("a", "main", other)], {"main": file_entry("main")})
    verdict = where.refused["a/main"]
    assert verdict.stalled and verdict.reason == "NameConflict"
    assert "--cluster file entry" in verdict.message
    assert where.clusters["main"].bootstrap_servers == "kafka:9092"


def test_the_older_tiered_cluster_of_a_name_stays_in_effect() -> None:
    other = {**SPEC, "bootstrapServers": "elsewhere:9092"}
    where = decide.directory([obj("b", "main", other, "2"), obj("a", "main", SPEC, "1")], {})
    assert where.clusters["main"].bootstrap_servers == "kafka:9092"
    assert "TieredCluster a/main, which is older" in where.refused["b/main"].message


def test_invalid_spec_long_name_and_waiting_strimzi() -> None:
    strimzi = {"strimzi": {"kafka": "k"}, "remote": {"url": "s3://b/t"}}
    where = decide.directory(
        [obj("a", "bad", {"remote": {"url": "s3://b/t"}}), obj("a", "x" * 64, SPEC), obj("a", "s", strimzi)],
        {},
    )
    assert where.clusters == {}
    assert where.refused["a/bad"].reason == "InvalidSpec"
    assert "bootstrapServers is required" in where.refused["a/bad"].message
    assert where.refused[f"a/{'x' * 64}"].reason == "InvalidName"
    waiting = where.refused["a/s"]
    assert waiting.reconciling and not waiting.stalled and "Strimzi Kafka k" in waiting.message
    ready = decide.directory([obj("a", "s", strimzi, strimzi_bootstrap="k-kafka-bootstrap:9092")], {})
    assert ready.clusters["s"].bootstrap_servers == "k-kafka-bootstrap:9092"


def test_bucket_checks_run_for_new_settings_and_repeat_after_failures_sooner() -> None:
    key = "k1"
    assert decide.bucket_check_due(None, key, False, NOW)
    assert not decide.bucket_check_due(None, key, True, NOW)  # one runs
    started = BucketCheck(spec_key=key, job="j")
    assert decide.bucket_check_due(started, key, False, NOW)  # ended without a verdict
    at = (NOW - datetime.timedelta(seconds=decide.BUCKET_RETRY_SECONDS)).isoformat()
    failed = BucketCheck(reachable=False, spec_key=key, checked_at=at)
    passed = failed.model_copy(update={"reachable": True})
    assert decide.bucket_check_due(failed, key, False, NOW)
    assert not decide.bucket_check_due(passed, key, False, NOW)
    assert decide.bucket_check_due(passed, "k2", False, NOW)  # settings changed


def test_the_verdict_names_the_first_problem() -> None:
    cluster = obj("a", "main", SPEC)
    where = decide.directory([cluster], {})
    key = decide.bucket_key(where.clusters["main"])
    members = decide.Members(topics=2, brokers=3)
    down = KafkaCheck(reachable=False, message="cannot reach Kafka: list topics on kafka:9092: timed out")
    up = KafkaCheck(reachable=True, bootstrap_servers="kafka:9092", broker_ids=[0, 1, 2])
    bad = BucketCheck(reachable=False, spec_key=key, message="bucket 'b' does not exist", checked_at="x")
    good = bad.model_copy(update={"reachable": True})
    first = decide.health(cluster, where, down, bad, members, key)
    assert (first.reason, first.reconciling, first.stalled) == ("KafkaUnreachable", True, False)
    assert "kafka:9092" in first.message
    stalled = decide.health(cluster, where, up, bad, members, key)
    assert (stalled.reason, stalled.stalled) == ("BucketUnreachable", True)
    assert stalled.message == "remote tier: bucket 'b' does not exist"
    named = bad.model_copy(update={"message": "remote tier s3://b/t: bucket 'b' does not exist"})
    said_once = decide.health(cluster, where, up, named, members, key)
    assert said_once.message == "remote tier s3://b/t: bucket 'b' does not exist", "the tier named once"
    checking = decide.health(cluster, where, up, good, members, "other-settings")
    assert checking.reason == "CheckingBucket" and checking.reconciling
    ready = decide.health(cluster, where, up, good, members, key)
    assert ready.ready and "3 brokers" in ready.message and "2 TieredTopics" in ready.message
    deleting = obj("a", "main", SPEC, deleting=True)
    verdict = decide.health(deleting, where, up, good, members, key)
    assert verdict.reason == "Deleting" and "no tier is deleted" in verdict.message
    assert not decide.may_release(deleting, members)
    assert decide.may_release(deleting, decide.Members())


def test_a_bucket_check_result_is_read_or_named_missing() -> None:
    assert decide.decode_bucket_check('{"reachable": true, "message": "ok"}', "j", "Succeeded") == (
        True,
        "ok",
    )
    reachable, message = decide.decode_bucket_check(None, "j", "Failed")
    assert not reachable and "Job j failed without a result" in message
