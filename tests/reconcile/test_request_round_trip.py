"""Every kind of work a round asks for reaches both executors the same way: the request's Job arguments,
parsed by the ``tierkeeper`` command the Job runs, come back as an equal request, and as exactly the
options the in-process executor (standalone mode) hands to the same ``jobs`` function. Pure: no Kafka,
no control plane."""

from __future__ import annotations

import dataclasses
import datetime
import os
from pathlib import Path
from typing import Any

import pytest

from storage_core.adapters.kafka_client_config import cluster_client_config
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.resources import ReplicaFetchers, TieredBrokerSpec, TieredTopicSpec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.api.trim_hold import TrimHold
from storage_core.cli.cleanup import cleanup_options_from_args
from storage_core.cli.common import storage_options
from storage_core.cli.copy import copy_options_from_args
from storage_core.cli.main import build_parser
from storage_core.jobs.cleanup import cleanup_options
from storage_core.jobs.copy import CopyReport, copy_options
from storage_core.reconcile.planner import CleanupAction, CopyAction, TopicPartitions
from storage_core.reconcile.requests import (
    Request,
    check_remote_request,
    cleanup_request,
    copy_request,
    delete_request,
    fetcher_step_request,
    rebuild_request,
    request_from_args,
)
from storage_core.reconcile.results import decode_cleanup, decode_copy, encode_cleanup, encode_copy
from storage_core.reconcile.round import CleanupOutcome, CopyOutcome, Statuses, fold_cleanup, fold_copy
from storage_core.tiering.partition_copy import PartitionCopyResult
from tierkeeper_operator.jobs import job_args


def cluster(config_dir: bool, **jobs: Any) -> KafkaClusterConfig:
    raw: dict[str, Any] = {
        "name": "c",
        "bootstrapServers": "k1:9092,k2:9092",
        "clientConfig": {"security.protocol": "SASL_SSL", "client.id": "tk"},
        "remote": {
            "url": "s3://bucket/prefix",
            "storageOptions": {"client_kwargs": {"endpoint_url": "http://m:9000"}, "anon": False},
        },
        "jobs": {"copyParallelism": 3, **jobs},
    }
    if config_dir:
        raw["clientConfigSecretRef"] = {"name": "kafka-sasl"}
    return KafkaClusterConfig.model_validate(raw)


BROKER = TieredBrokerSpec.model_validate(
    {
        "clusterRef": {"name": "c"},
        "brokerId": 2,
        "logDir": {"claimName": "data-2", "mountPath": "/var/lib/kafka", "path": "/var/lib/kafka/log0"},
        "rebuild": {"parallelism": 6},
    }
)
TOPIC = TieredTopicSpec.model_validate(
    {
        "clusterRef": {"name": "c"},
        "topic": "orders",
        "localRetentionMs": 600000,
        "remoteRetentionMs": 86400000,
        "localRetentionBytes": 1 << 29,
        "remoteRetentionBytes": 1 << 30,
        "copy": {"intervalSeconds": 120},  # not the default: the cleanup must judge with this one
    }
)


@pytest.fixture
def secret_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cluster's clientConfigSecretRef as the executor mounts it: one file per property."""
    for name in list(os.environ):
        if name.startswith("TIERKEEPER_"):
            monkeypatch.delenv(name)
    (tmp_path / "sasl.username").write_text("tk")
    (tmp_path / "sasl.password").write_text("hunter2")
    return tmp_path


def parsed(args: list[str]) -> Any:
    return build_parser().parse_args(args)


def round_trip(request: Request) -> Request:
    """The request the Job's command line stands for, parsed by the ``tierkeeper`` parser the Job runs."""
    return request_from_args(parsed(job_args(request)))


@pytest.mark.parametrize("with_secret", [False, True])
@pytest.mark.parametrize("rate", [None, 5_000_000])
def test_a_copy_request_parses_back_into_the_in_process_options(
    secret_dir: Path, with_secret: bool, rate: int | None
) -> None:
    config = cluster(with_secret, maxBytesPerSecond=rate) if rate else cluster(with_secret)
    action = CopyAction(
        "c",
        2,
        "kafka/broker-2",
        (TopicPartitions("kafka/orders", "orders", (0, 3)), TopicPartitions("kafka/a=b", "a=b", (1,))),
    )
    request = copy_request(action, config, BROKER, config_dir=str(secret_dir))
    assert round_trip(request) == request
    kafka_config = cluster_client_config(config, secret_dir if with_secret else None)
    from_job = copy_options_from_args(parsed(job_args(request)))
    assert from_job == copy_options(request, kafka_config)
    assert from_job.max_bytes_per_second == rate and from_job.parallelism == 3
    assert from_job.assignment == (("orders", 0), ("orders", 3), ("a=b", 1))
    assert ("sasl.password" in from_job.kafka_config) is with_secret
    assert "hunter2" not in " ".join(job_args(request))


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_cleanup_request_parses_back_into_the_in_process_options(secret_dir: Path, engine: str) -> None:
    extra = {"cleanupEngine": "spark", "sparkMaster": "spark://m:7077", "sparkConf": {"b": "2", "a": "1"}}
    config = cluster(True, **(extra if engine == "spark" else {}))
    request = cleanup_request(
        CleanupAction("c", "kafka/orders", "orders", TOPIC), config, config_dir=str(secret_dir)
    )
    assert round_trip(request) == request
    args = parsed(job_args(request))
    from_job = dataclasses.replace(cleanup_options_from_args(args), now_ms=0)
    in_process = cleanup_options(request, cluster_client_config(config, secret_dir), now_ms=0)
    assert from_job == in_process
    assert in_process.trim_timing.copy_interval_ms == 120_000  # the topic's interval, not the 1 h default
    assert (args.engine, args.spark_master, tuple(args.spark_conf)) == (
        request.engine,
        request.spark.master,
        tuple(f"{k}={v}" for k, v in request.spark.conf),
    )


@pytest.mark.parametrize(
    ("topic_hold", "cluster_hold", "expected"),
    [
        (None, None, TrimHold()),  # neither says: the model's defaults
        (
            None,
            {"maxAgeMs": 5_000_000, "ignoreGroups": ["connect-*"]},
            TrimHold(max_age_ms=5_000_000, ignore_groups=["connect-*"]),
        ),
        (
            {"maxBytes": 1 << 30, "inactiveGroupMs": -1, "ignoreGroups": ["audit", "etl-*"]},
            {"maxAgeMs": 5_000_000},
            TrimHold(max_bytes=1 << 30, inactive_group_ms=-1, ignore_groups=["audit", "etl-*"]),
        ),  # the topic's trimHold replaces the cluster's whole, it is not merged field by field
        ({"enabled": False}, {"maxAgeMs": 5_000_000}, TrimHold(enabled=False)),
    ],
)
def test_a_cleanup_request_holds_the_trim_as_the_topic_else_the_cluster_says(
    secret_dir: Path, topic_hold: Any, cluster_hold: Any, expected: TrimHold
) -> None:
    config = cluster(False)
    if cluster_hold is not None:
        config = config.model_copy(update={"trim_hold": TrimHold.model_validate(cluster_hold)})
    spec = (
        TOPIC
        if topic_hold is None
        else TOPIC.model_copy(update={"trim_hold": TrimHold.model_validate(topic_hold)})
    )
    request = cleanup_request(CleanupAction("c", "kafka/orders", "orders", spec), config, config_dir=None)
    assert request.trim_hold == expected
    assert round_trip(request) == request
    from_job = cleanup_options_from_args(parsed(job_args(request)))
    assert from_job.trim_hold == cleanup_options(request, {}).trim_hold == expected


def test_a_delete_request_parses_back(secret_dir: Path) -> None:
    config = cluster(False)
    request = delete_request("orders", "AAAAAAAAAAAAAAAAAAAAAA", config)
    assert round_trip(request) == request
    args = parsed(job_args(request))
    assert (args.command, args.delete_topic, args.topic_id, args.missing_ok) == (
        "cleanup",
        "orders",
        request.topic_id,
        True,
    )
    assert (args.remote, storage_options(args)) == (request.remote.url, dict(request.remote.storage_options))


def test_a_rebuild_request_parses_back(secret_dir: Path) -> None:
    config = cluster(True)
    request = rebuild_request(BROKER, config, config_dir=str(secret_dir))
    assert round_trip(request) == request
    args = parsed(job_args(request))
    assert (args.command, args.log_dir, args.broker_id, args.parallelism, args.bootstrap_servers) == (
        "rebuild",
        [BROKER.log_dir.path],
        2,
        6,
        config.bootstrap_servers,
    )
    assert (args.remote, storage_options(args)) == (request.remote.url, dict(request.remote.storage_options))
    assert args.kafka_config_dir == str(secret_dir)


def test_a_check_remote_request_parses_back() -> None:
    request = check_remote_request(cluster(False))
    args = parsed(job_args(request))
    assert args.command == "check-remote" and args.result_file == "/dev/termination-log"
    assert (args.remote, storage_options(args)) == (request.remote.url, dict(request.remote.storage_options))
    assert round_trip(request) == request


@pytest.mark.parametrize("with_secret", [False, True])
def test_a_fetcher_step_request_parses_back(secret_dir: Path, with_secret: bool) -> None:
    spec = ReplicaFetchers.model_validate({"mode": "auto", "stepTimeoutSeconds": 45})
    request = fetcher_step_request(cluster(with_secret), 2, 8, spec, config_dir=str(secret_dir))
    assert round_trip(request) == request
    assert (request.timeout_seconds, request.kafka.config_dir is not None) == (45.0, with_secret)
    assert "hunter2" not in " ".join(job_args(request))


def test_a_storage_option_that_reads_as_json_stays_a_string() -> None:
    config = cluster(False)
    config.remote.storage_options.update({"max_pool": "10", "anon": "false", "region_name": "eu"})
    request = rebuild_request(BROKER, config, config_dir=None)
    assert round_trip(request) == request


NOW = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)


def test_the_same_copy_outcome_folds_into_the_same_status_through_a_job_result_or_in_process() -> None:
    report = CopyReport(
        partitions=[
            PartitionCopyResult(
                "orders",
                0,
                copied_segments=3,
                copied_bytes=3000,
                remote_end_offset=299,
                topic_id="T1",
                remote_start_offset=0,
                remote_segments=3,
                remote_bytes=3000,
                untiered_segments=1,
                untiered_bytes=1000,
            ),
            PartitionCopyResult("orders", 3, error="orders-3: CRC mismatch", topic_id="T1"),
            PartitionCopyResult(
                "a=b", 1, copied_segments=1, copied_bytes=10, remote_end_offset=9, topic_id="T2"
            ),
        ]
    )
    work = [("kafka/orders", "orders"), ("kafka/a=b", "a=b")]

    def fold(rows: list[dict[str, Any]]) -> Statuses:
        statuses = Statuses(
            {"kafka/orders": TieredTopicStatus(), "kafka/a=b": TieredTopicStatus()},
            {"kafka/broker-2": TieredBrokerStatus()},
        )
        fold_copy(statuses, work, "kafka/broker-2", CopyOutcome(rows, None, "job"), NOW)
        return statuses

    by_topic, failure = decode_copy(encode_copy(report.rows()))
    assert failure is None
    through_job = fold([row for rows in by_topic.values() for row in rows])
    in_process = fold(report.rows())
    assert through_job == in_process
    orders = in_process.topics["kafka/orders"]
    assert orders.last_copy is not None and orders.last_copy.result == "Failed"  # partition 3 failed
    assert orders.remote is not None and orders.remote.partitions[0].end_offset == 299


def test_the_same_cleanup_outcome_folds_alike_and_only_the_current_incarnation_counts() -> None:
    status = TieredTopicStatus.model_validate(
        {
            "topicId": "T1",
            "remote": {
                "segments": 5,
                "bytes": 500,
                "partitions": [
                    {"partition": 0, "startOffset": 0, "endOffset": 499, "segments": 5, "bytes": 500}
                ],
            },
        }
    )
    report = {
        "partitions": [
            {
                "topic": "orders",
                "topic_id": "T1",
                "partition": 0,
                "remote_start_offset": 200,
                "deleted": [{}, {}],
                "bytes_deleted": 200,
                "local_trim": {"from": 0, "to": 300},
            },
            # An older incarnation of the topic, cleaned in the same run: not this status's tier.
            {
                "topic": "orders",
                "topic_id": "T0",
                "partition": 0,
                "remote_start_offset": 900,
                "deleted": [{}],
                "bytes_deleted": 100,
                "local_trim": None,
            },
        ],
        "errors": [],
        "bytes_deleted": 300,
    }

    def fold(outcome_report: dict[str, Any] | None) -> TieredTopicStatus:
        statuses = Statuses({"kafka/orders": status}, {})
        fold_cleanup(statuses, ["kafka/orders"], CleanupOutcome(outcome_report, None, "job"), NOW)
        return statuses.topics["kafka/orders"]

    decoded, failure = decode_cleanup(encode_cleanup(report))
    assert failure is None
    assert fold(decoded) == fold(report)
    (tier,) = fold(report).remote.partitions  # type: ignore[union-attr]
    assert (tier.start_offset, tier.segments, tier.bytes) == (200, 3, 300)


TABLE_TOPIC = TieredTopicSpec.model_validate(
    {
        "clusterRef": {"name": "c"},
        "topic": "orders.v1",
        "table": {
            "location": "s3://bucket/tables/orders",
            "catalog": {"name": "lake", "properties": {"type": "rest", "uri": "https://cat"}},
            "isolation": "read_uncommitted",
            "maintenance": {"keepSnapshots": 3, "compactMinFiles": 4},
            "valueDecoding": {"format": "avro", "schemaRegistryUrl": "http://registry:8081"},
        },
    }
)


@pytest.mark.parametrize("kind", ["export", "maintain"])
@pytest.mark.parametrize("with_catalog", [False, True])
def test_a_table_request_parses_back_into_the_in_process_inputs(kind: str, with_catalog: bool) -> None:
    from storage_core.cli.export import catalog_config, target_options
    from storage_core.jobs.table_runs import export_inputs, maintenance_inputs
    from storage_core.reconcile.requests import table_request
    from storage_core.reconcile.tables import TableAction

    assert TABLE_TOPIC.table is not None
    spec = TABLE_TOPIC.table if with_catalog else TABLE_TOPIC.table.model_copy(update={"catalog": None})
    config = cluster(False, sparkMaster="spark://m:7077", sparkConf={"b": "2"})
    request = table_request(TableAction(kind, "c", "kafka/orders", "orders.v1", spec), config)  # type: ignore[arg-type]
    assert round_trip(request) == request
    args = parsed(job_args(request))
    options = dict(request.remote.storage_options)
    assert target_options(args, storage_options(args)) == options  # same scheme: the tier's options
    if kind == "export":
        source, target, opts, name, catalog = export_inputs(request, options)  # type: ignore[arg-type]
        assert (args.format, args.topic, args.isolation) == ("iceberg", "orders.v1", "read_uncommitted")
        assert (target.url, target.options, name) == (args.to, options, "tierkeeper.orders_v1")
        assert (str(opts.isolation.value), args.spark_master) == ("read_uncommitted", "spark://m:7077")
        from storage_core.formats.value_decoding import ValueDecoding
        from storage_core.jobs.table_runs import value_decoding_of

        decoding = value_decoding_of(request)  # type: ignore[arg-type]
        assert (
            decoding
            == ValueDecoding("avro", "http://registry:8081")
            == ValueDecoding(args.value_format, args.schema_registry)
        )
    else:
        target, name, catalog, maintenance = maintenance_inputs(request, options, 0)  # type: ignore[arg-type]
        assert (maintenance.keep_snapshots, maintenance.compact_min_files) == (3, 4)
        assert (args.keep_snapshots, args.compact_min_files, args.orphan_min_age_ms) == (3, 4, 3 * 86_400_000)
        assert (target.url, name) == ("s3://bucket/tables/orders", "tierkeeper.orders_v1")
    assert catalog == catalog_config(args)
    assert (catalog is not None) is with_catalog
