"""The API models accept what the docs promise and reject the rest with a message naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.fields import INFINITE
from storage_core.api.parse import parse_spec
from storage_core.api.resources import ReplicaFetchers, TieredBrokerSpec, TieredTopicSpec


def topic_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "clusterRef": {"name": "cluster-a"},
        "topic": "orders",
    }
    spec.update(overrides)
    return spec


def broker_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "clusterRef": {"name": "cluster-a"},
        "brokerId": 0,
        "logDir": {"claimName": "data-kafka-0", "path": "/var/lib/kafka/data/kafka-log0"},
    }
    spec.update(overrides)
    return spec


def cluster_config(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "cluster-a",
        "bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092",
        "remote": {"url": "s3://tiered/cluster-a"},
    }
    config.update(overrides)
    return config


def problem_of(
    model: type[TieredTopicSpec] | type[TieredBrokerSpec] | type[KafkaClusterConfig], spec: dict[str, Any]
) -> str:
    verdict = parse_spec(model, spec)
    assert verdict.problem is not None, f"expected {spec} to be rejected"
    assert "\n" not in verdict.problem
    return str(verdict.problem)


class TestTieredTopicDefaults:
    def test_minimal_spec_gets_safe_defaults(self) -> None:
        spec = TieredTopicSpec.model_validate(topic_spec())
        assert spec.remote_retention_ms == INFINITE
        assert spec.remote_retention_bytes == INFINITE
        assert spec.local_retention_bytes == INFINITE
        assert spec.paused is False
        assert spec.copy_policy.schedule is None
        assert spec.deletion_policy == "Retain"

    def test_round_trips_through_camel_case(self) -> None:
        raw = topic_spec(localRetentionMs=1000, remoteRetentionMs=5000, copy={"intervalSeconds": 60})
        spec = TieredTopicSpec.model_validate(raw)
        dumped = spec.model_dump(by_alias=True, exclude_unset=True)
        assert TieredTopicSpec.model_validate(dumped) == spec
        assert dumped["copy"] == {"intervalSeconds": 60}

    def test_cluster_is_a_reference(self) -> None:
        spec = TieredTopicSpec.model_validate(topic_spec())
        assert spec.cluster_ref.name == "cluster-a"


class TestTieredTopicRejections:
    def test_negative_copy_interval_names_the_field(self) -> None:
        problem = problem_of(TieredTopicSpec, topic_spec(copy={"intervalSeconds": -5}))
        assert problem.startswith("spec.copy.intervalSeconds:")
        assert "-5" in problem

    def test_wrong_type_names_the_field(self) -> None:
        problem = problem_of(TieredTopicSpec, topic_spec(localRetentionMs="a week"))
        assert problem.startswith("spec.localRetentionMs:")
        assert "integer" in problem

    def test_retention_below_minus_one_explains_infinite(self) -> None:
        problem = problem_of(TieredTopicSpec, topic_spec(remoteRetentionBytes=-2))
        assert problem.startswith("spec.remoteRetentionBytes:")
        assert "-1 (infinite)" in problem

    def test_local_retention_above_remote(self) -> None:
        problem = problem_of(TieredTopicSpec, topic_spec(localRetentionMs=7200000, remoteRetentionMs=3600000))
        assert "localRetentionMs" in problem and "remoteRetentionMs" in problem

    def test_infinite_local_with_finite_remote(self) -> None:
        problem = problem_of(
            TieredTopicSpec, topic_spec(localRetentionBytes=-1, remoteRetentionBytes=1 << 30)
        )
        assert "localRetentionBytes must not exceed remoteRetentionBytes (-1 means infinite" in problem

    def test_unknown_field_is_reported(self) -> None:
        problem = problem_of(TieredTopicSpec, topic_spec(localRetentionMS=5))
        assert problem == "spec.localRetentionMS: unknown field"

    def test_missing_field_is_reported(self) -> None:
        spec = topic_spec()
        del spec["topic"]
        assert problem_of(TieredTopicSpec, spec) == "spec.topic: required field is missing"

    @pytest.mark.parametrize("name", ["", ".", "..", "has space", "x" * 250, "ü"])
    def test_illegal_topic_names(self, name: str) -> None:
        assert problem_of(TieredTopicSpec, topic_spec(topic=name)).startswith("spec.topic:")

    def test_cluster_ref_must_be_a_kubernetes_name(self) -> None:
        problem = problem_of(TieredTopicSpec, topic_spec(clusterRef={"name": "Cluster_A"}))
        assert problem.startswith("spec.clusterRef.name:")

    def test_unknown_deletion_policy(self) -> None:
        problem = problem_of(TieredTopicSpec, topic_spec(deletionPolicy="Shred"))
        assert problem.startswith("spec.deletionPolicy:")

    def test_schedule_and_interval_are_exclusive(self) -> None:
        problem = problem_of(
            TieredTopicSpec, topic_spec(copy={"intervalSeconds": 60, "schedule": "*/5 * * * *"})
        )
        assert "mutually exclusive" in problem

    @pytest.mark.parametrize("schedule", ["*/5 * * * *", "0 3 * * MON-FRI", "@hourly"])
    def test_cron_schedules_accepted(self, schedule: str) -> None:
        assert (
            TieredTopicSpec.model_validate(topic_spec(copy={"schedule": schedule})).copy_policy.schedule
            == schedule
        )

    @pytest.mark.parametrize("schedule", ["every hour", "* * * *", "@sometimes"])
    def test_bad_cron_rejected(self, schedule: str) -> None:
        assert problem_of(TieredTopicSpec, topic_spec(copy={"schedule": schedule})).startswith(
            "spec.copy.schedule:"
        )

    def test_several_problems_stay_on_one_line(self) -> None:
        problem = problem_of(
            TieredTopicSpec, {"topic": "", "copy": {"intervalSeconds": 0}, "paused": "maybe"}
        )
        assert problem.count("; ") >= 3
        assert problem.endswith("more")


retention = st.one_of(st.just(INFINITE), st.integers(min_value=0, max_value=10**13))


@given(local=retention, remote=retention)
def test_local_retention_never_exceeds_remote(local: int, remote: int) -> None:
    # Oracle: -1 is infinity; local must fit inside remote.
    fits = remote == INFINITE or (local != INFINITE and local <= remote)
    verdict = parse_spec(TieredTopicSpec, topic_spec(localRetentionMs=local, remoteRetentionMs=remote))
    assert (verdict.problem is None) == fits, verdict.problem


class TestTieredBroker:
    def test_minimal_spec_defaults(self) -> None:
        spec = TieredBrokerSpec.model_validate(broker_spec())
        assert spec.rebuild.policy == "Never"
        assert spec.replica_fetchers is None
        assert spec.log_dir.mount_path == "/var/lib/kafka/data"
        assert spec.placement.pod_name is None

    def test_negative_broker_id(self) -> None:
        assert problem_of(TieredBrokerSpec, broker_spec(brokerId=-1)).startswith("spec.brokerId:")

    def test_relative_log_dir(self) -> None:
        assert problem_of(TieredBrokerSpec, broker_spec(logDir={"path": "data"})).startswith(
            "spec.logDir.path:"
        )

    def test_claim_name_must_be_a_kubernetes_name(self) -> None:
        problem = problem_of(
            TieredBrokerSpec, broker_spec(logDir={"claimName": "Data_0", "path": "/var/lib/kafka/data"})
        )
        assert problem.startswith("spec.logDir.claimName:")

    def test_path_outside_the_mount(self) -> None:
        problem = problem_of(
            TieredBrokerSpec, broker_spec(logDir={"claimName": "data-0", "path": "/srv/kafka"})
        )
        assert (
            problem == "spec.logDir: logDir.path must lie under logDir.mountPath when logDir.claimName is set"
        )

    def test_standalone_log_dir_needs_no_claim(self) -> None:
        spec = TieredBrokerSpec.model_validate(broker_spec(logDir={"path": "/srv/kafka"}))
        assert spec.log_dir.claim_name is None

    def test_unknown_rebuild_policy(self) -> None:
        assert problem_of(TieredBrokerSpec, broker_spec(rebuild={"policy": "Sometimes"})).startswith(
            "spec.rebuild.policy:"
        )


class TestReplicaFetchers:
    def test_auto_defaults(self) -> None:
        fetchers = ReplicaFetchers.model_validate({})
        assert fetchers.mode == "auto" and fetchers.minimum <= fetchers.maximum and fetchers.value is None

    def test_fixed_needs_value(self) -> None:
        problem = problem_of(TieredBrokerSpec, broker_spec(replicaFetchers={"mode": "fixed"}))
        assert "replicaFetchers.value is required" in problem

    def test_fixed_with_bounds_is_rejected(self) -> None:
        problem = problem_of(
            TieredBrokerSpec, broker_spec(replicaFetchers={"mode": "fixed", "value": 4, "max": 8})
        )
        assert "min/max apply to mode auto only" in problem

    def test_auto_with_value_is_rejected(self) -> None:
        problem = problem_of(TieredBrokerSpec, broker_spec(replicaFetchers={"mode": "auto", "value": 4}))
        assert "value applies to mode fixed only" in problem

    def test_min_above_max(self) -> None:
        problem = problem_of(TieredBrokerSpec, broker_spec(replicaFetchers={"min": 6, "max": 3}))
        assert "replicaFetchers.min must not exceed replicaFetchers.max" in problem

    def test_fixed_value_is_kept(self) -> None:
        spec = TieredBrokerSpec.model_validate(broker_spec(replicaFetchers={"mode": "fixed", "value": 5}))
        assert spec.replica_fetchers is not None and spec.replica_fetchers.value == 5

    def test_models_are_immutable(self) -> None:
        fetchers = ReplicaFetchers.model_validate({"mode": "fixed", "value": 2})
        with pytest.raises(ValidationError):
            fetchers.value = 3


class TestClusterConfig:
    def test_minimal_config_defaults(self) -> None:
        config = KafkaClusterConfig.model_validate(cluster_config())
        assert config.remote.storage_options == {}
        assert config.jobs.backoff_limit >= 0 and config.jobs.ttl_seconds_after_finished > 0

    def test_bootstrap_list_is_normalised(self) -> None:
        config = KafkaClusterConfig.model_validate(cluster_config(bootstrapServers=" a:1 , b:2"))
        assert config.bootstrap_servers == "a:1,b:2"

    @pytest.mark.parametrize("servers", ["kafka", "kafka:", "kafka:99999", "a:1,,b:2", "http://a:1"])
    def test_bad_bootstrap_servers(self, servers: str) -> None:
        problem = problem_of(KafkaClusterConfig, cluster_config(bootstrapServers=servers))
        assert problem.startswith("spec.bootstrapServers:")

    def test_url_needs_a_scheme(self) -> None:
        problem = problem_of(KafkaClusterConfig, cluster_config(remote={"url": "bucket/prefix"}))
        assert problem.startswith("spec.remote.url:")
