"""One plan, two executors, the same requests and the same statuses: the operator's rounds on the real API
server create Jobs whose arguments, parsed by the ``tierkeeper`` command the Jobs run, are exactly the
requests standalone mode runs in process for the same resources, on the same real Kafka; and the results
those requests gave in process, left by the operator's Jobs as their termination messages, fold into the
same TieredTopic and TieredBroker statuses through the API server as in standalone mode's memory. The
topic's copy interval is not the default (standalone mode used to judge its local trim with the default
1 h), and the cluster has a rate limit (standalone mode used to ignore it). The topic keeps an Iceberg
table: standalone mode exports to it on Spark, the operator's export Job folds the same result. A consumer
group reading the brokers directly holds the trim: both statuses say what holds it (``trimHold``).

Standalone mode does the work (a second copy of the same log would find nothing left to copy): the Jobs'
image, run by the process kubelet, replays the result standalone mode's run of the same request gave,
written where the real command writes it (``--result-file /dev/termination-log``), as soon as it exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from k8s_helpers import job_finished, replay_image, unique
from test_k8s_operator_real import log_dir_claims

from harness.control_plane import ControlPlane
from harness.k8s import load_crds
from harness.kafka import KafkaCluster
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.cli.main import build_parser
from storage_core.jobs.in_process import InProcessExecutor
from storage_core.jobs.resource_files import load_manifests
from storage_core.jobs.standalone import Standalone
from storage_core.reconcile.requests import (
    CleanupRequest,
    CopyRequest,
    ExportRequest,
    Request,
    request_from_args,
)
from storage_core.reconcile.results import encode_cleanup, encode_copy, encode_table
from storage_core.reconcile.round import CleanupOutcome, CopyOutcome, TableOutcome
from tierkeeper_operator import GROUP, VERSION
from tierkeeper_operator.compose import build_reconciler
from tierkeeper_operator.kube import Kube


def _resources(ns: str, topic: str, kafka: KafkaCluster, table: str) -> list[dict[str, Any]]:
    (broker_id,) = kafka.node_ids
    log_dir = str(kafka.log_dir(broker_id))
    meta = {"namespace": ns}
    return [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TieredBroker",
            "metadata": {**meta, "name": f"broker-{broker_id}"},
            "spec": {
                "clusterRef": {"name": "local"},
                "brokerId": broker_id,
                "logDir": {"claimName": f"data-{broker_id}", "mountPath": log_dir, "path": log_dir},
            },
        },
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TieredTopic",
            "metadata": {**meta, "name": topic},
            "spec": {
                "clusterRef": {"name": "local"},
                "topic": topic,
                "localRetentionMs": 0,
                "copy": {"intervalSeconds": 600},
                "table": {"location": table},
            },
        },
    ]


def _record_outcomes(monkeypatch: pytest.MonkeyPatch, results: Path) -> None:
    """Standalone mode's outcomes, written as the Job's command writes them (atomically: a Job polls)."""

    def leave(verb: str, text: str) -> None:
        (results / f".{verb}").write_text(text)
        (results / f".{verb}").rename(results / verb)

    run_copy, run_cleanup, run_table = (
        InProcessExecutor.copy,
        InProcessExecutor.cleanup,
        InProcessExecutor.table,
    )

    def copy(self: InProcessExecutor, action: Any) -> CopyOutcome:
        outcome = run_copy(self, action)
        leave("copy", encode_copy(outcome.rows, outcome.failure))
        return outcome

    def cleanup(self: InProcessExecutor, action: Any) -> CleanupOutcome:
        outcome = run_cleanup(self, action)
        assert outcome.report is not None, outcome.failure
        leave("cleanup", encode_cleanup(outcome.report))
        return outcome

    def table(self: InProcessExecutor, action: Any) -> TableOutcome:
        outcome = run_table(self, action)
        assert action.kind == "export" and outcome.report is not None, outcome.failure
        leave("export", encode_table("export", outcome.report))
        return outcome

    monkeypatch.setattr(InProcessExecutor, "copy", copy)
    monkeypatch.setattr(InProcessExecutor, "cleanup", cleanup)
    monkeypatch.setattr(InProcessExecutor, "table", table)


def _folded(status: Any) -> dict[str, Any]:
    """What a Job's result folds into: the run outcomes (but when and by which Job), the tier, the lag, the
    trim hold (but when)."""
    fields = {"topic_id", "remote", "copy_lag", "last_copy", "last_cleanup", "table", "trim_hold"}
    out = status.model_dump(include=fields)
    if out.get("trim_hold"):
        out["trim_hold"].pop("checked_at")
    for run in ("last_copy", "last_cleanup"):
        if out.get(run):
            out[run] = {k: v for k, v in out[run].items() if k not in ("time", "job")}
    if out.get("table") and out["table"].get("last_export"):
        out["table"]["last_export"] = {
            k: v for k, v in out["table"]["last_export"].items() if k not in ("time", "job")
        }
    return out


def _job_requests(plane: ControlPlane, ns: str) -> list[Request]:
    jobs = plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    return [
        request_from_args(build_parser().parse_args(job["spec"]["template"]["spec"]["containers"][0]["args"]))
        for job in jobs
    ]


def _by_kind(requests: list[Request]) -> dict[str, list[Request]]:
    return {
        kind.__name__: [r for r in requests if isinstance(r, kind)]
        for kind in (CopyRequest, CleanupRequest, ExportRequest)
    }


def test_the_operators_jobs_and_standalone_mode_run_the_same_requests_and_fold_the_same_results(
    k8s_control_plane: ControlPlane,
    k8s_namespace: str,
    kafka_broker: KafkaCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spark: Any,  # the session's: standalone mode's export runs on the active session (not stopped after)
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    plane.apply_crds(load_crds())
    log_dir_claims(plane, ns, kafka_broker)
    results = tmp_path / "results"
    results.mkdir()
    _record_outcomes(monkeypatch, results)
    topic = unique("agree")
    servers = kafka_broker.bootstrap_servers
    config = {"internal.segment.bytes": "16384", "retention.ms": "4500000"}  # room for 10 min + 1 h
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(60)
    kafka_broker.wait_topic(topic, 1)
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "batch.size": 4096})
    for i in range(400):
        producer.produce(topic, value=f"{i:06d}".encode() * 20, partition=0)
    assert producer.flush(60) == 0
    # A group reading the brokers directly, committed far below the window: both executors hold the trim.
    reader = Consumer({"bootstrap.servers": servers, "group.id": f"direct-{topic}"})
    reader.commit(offsets=[TopicPartition(topic, 0, 50)], asynchronous=False)
    reader.close()
    cluster = KafkaClusterConfig.model_validate(
        {
            "name": "local",
            "bootstrapServers": servers,
            "clientConfig": {"client.id": "tierkeeper-agree"},
            "remote": {"url": f"file://{tmp_path / 'remote'}"},
            "jobs": {
                "image": replay_image(plane, results),
                "maxBytesPerSecond": 50_000_000,
                "copyParallelism": 2,
            },
        }
    )
    table = f"file://{tmp_path / 'table'}"
    resources = _resources(ns, topic, kafka_broker, table)

    for obj in resources:
        plural = obj["kind"].lower() + "s"
        plane.request("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{plural}", obj)
    kube = Kube(plane.api_client(), (ns,))
    operator = build_reconciler(kube, {"local": cluster})
    operator.run_round()  # the copy Job (no cleanup before a first copy result); it waits for its result

    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "all.yaml").write_text(yaml.safe_dump_all(resources))
    standalone = Standalone({"local": cluster}, load_manifests(tmp_path / "manifests"))
    report = standalone.run_round()  # the copy, its result folded in, then the cleanup and the export
    in_process = _by_kind(report.requests)

    job_finished(plane, ns, "copy")
    operator.run_round()  # the copy Job's result folded; the cleanup Job, planned from that status
    job_finished(plane, ns, "cleanup")
    operator.run_round()  # the cleanup Job's result folded
    job_finished(plane, ns, "export")
    operator.run_round()  # the export Job's result folded
    through_jobs = _by_kind(_job_requests(plane, ns))

    (copy,) = in_process["CopyRequest"]
    assert copy.assignment == ((topic, (0,)),) and copy.max_bytes_per_second == 50_000_000
    (cleanup,) = in_process["CleanupRequest"]
    assert cleanup.copy_interval_ms == 600_000  # the topic's interval, not the 1 h default
    assert through_jobs == in_process
    # The in-process runs were real: copied, then trimmed behind the tier with the topic's interval.
    status = report.plan.topic_status[f"{ns}/{topic}"]
    assert status.last_cleanup is not None and status.last_cleanup.result == "Succeeded", status
    assert status.remote is not None and status.remote.segments > 0, status
    # The export ran on Spark in this process: the table holds every tiered offset.
    (export,) = in_process["ExportRequest"]
    assert (export.topic, export.table.location) == (topic, table)
    assert status.table is not None and status.table.last_export is not None, status.table
    assert status.table.last_export.result == "Succeeded" and status.table.lag_offsets == 0, status.table
    assert not spark.sparkContext._jsc.sc().isStopped()  # a session it did not start is left running

    # The same results, folded by the operator from its Jobs, through the API server.
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}"
    live_topic = TieredTopicStatus.model_validate(
        plane.request("GET", f"{path}/tieredtopics/{topic}")["status"]
    )
    assert _folded(live_topic) == _folded(status)
    assert status.trim_hold is not None and status.trim_hold.held_partitions == 1, status.trim_hold
    (held,) = status.trim_hold.partitions
    assert [(h.group, h.offset) for h in held.held_by] == [(f"direct-{topic}", 50)]
    live_conditions = {c.type: (c.status, c.reason) for c in live_topic.conditions}
    assert live_conditions["TrimHeld"] == ("True", "TrimHeld"), live_conditions
    assert live_topic.last_copy is not None and live_topic.last_copy.job  # it did come from a Job
    (broker_key,) = standalone.broker_status
    broker = resources[0]["metadata"]["name"]
    live_broker = TieredBrokerStatus.model_validate(
        plane.request("GET", f"{path}/tieredbrokers/{broker}")["status"]
    )
    assert _folded(live_broker) == _folded(report.plan.broker_status[broker_key])
