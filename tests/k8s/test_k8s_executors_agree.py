"""One plan, two executors, the same requests: the operator's rounds on the real API server create Jobs
whose arguments, parsed by the ``tierkeeper`` command the Jobs run, are exactly the requests standalone mode
runs in process for the same resources, on the same real Kafka. The topic's copy interval is not the
default (standalone mode used to judge its local trim with the default 1 h), and the cluster has a rate
limit (standalone mode used to ignore it).

The Jobs' pods are pinned to a node that does not exist, so none runs: standalone mode does the work, and
its topic status after the copy (its cleanup left out) is written to the TieredTopic, so the operator's
next round plans from the same status: the cleanup Job. That the same Job result folds into the same
status either way: reconcile/test_request_round_trip.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from k8s_helpers import unique

from harness.control_plane import ControlPlane
from harness.k8s import load_crds
from harness.kafka import KafkaCluster
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.cli.main import build_parser
from storage_core.jobs.resource_files import load_manifests
from storage_core.jobs.standalone import Standalone
from storage_core.reconcile.requests import CleanupRequest, CopyRequest, Request, request_from_args
from tierkeeper_operator import GROUP, VERSION
from tierkeeper_operator.kube import Kube
from tierkeeper_operator.loop import Reconciler


def _resources(ns: str, topic: str, kafka: KafkaCluster) -> list[dict[str, Any]]:
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
                "logDir": {"claimName": "data", "mountPath": log_dir, "path": log_dir},
                "placement": {"nodeName": "no-such-node"},
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
            },
        },
    ]


def _job_requests(plane: ControlPlane, ns: str) -> list[Request]:
    jobs = plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    return [
        request_from_args(build_parser().parse_args(job["spec"]["template"]["spec"]["containers"][0]["args"]))
        for job in jobs
    ]


def _by_kind(requests: list[Request]) -> dict[str, list[Request]]:
    return {
        kind.__name__: [r for r in requests if isinstance(r, kind)] for kind in (CopyRequest, CleanupRequest)
    }


def test_the_operators_jobs_and_standalone_mode_run_the_same_requests(
    k8s_control_plane: ControlPlane, k8s_namespace: str, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    plane.apply_crds(load_crds())
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
    cluster = KafkaClusterConfig.model_validate(
        {
            "name": "local",
            "bootstrapServers": servers,
            "clientConfig": {"client.id": "tierkeeper-agree"},
            "remote": {"url": f"file://{tmp_path / 'remote'}"},
            "jobs": {"image": "tierkeeper", "maxBytesPerSecond": 50_000_000, "copyParallelism": 2},
        }
    )
    resources = _resources(ns, topic, kafka_broker)

    for obj in resources:
        plural = obj["kind"].lower() + "s"
        plane.request("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{plural}", obj)
    kube = Kube(plane.api_client(), (ns,))
    operator = Reconciler(kube, {"local": cluster})
    operator.run_round()  # the copy (no cleanup before a first copy result)

    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "all.yaml").write_text(yaml.safe_dump_all(resources))
    standalone = Standalone({"local": cluster}, load_manifests(tmp_path / "manifests"))
    report = standalone.run_round()  # the copy, its result folded in, then the cleanup
    in_process = _by_kind(report.requests)

    copied = standalone.topic_status[f"{ns}/{topic}"].model_copy(update={"last_cleanup": None})
    kube.patch_status(
        "tieredtopics", ns, topic, copied.model_dump(by_alias=True, mode="json", exclude_none=True)
    )
    operator.run_round()  # the cleanup, from the same status
    through_jobs = _by_kind(_job_requests(plane, ns))

    (copy,) = in_process["CopyRequest"]
    assert copy.assignment == ((topic, (0,)),) and copy.max_bytes_per_second == 50_000_000
    (cleanup,) = in_process["CleanupRequest"]
    assert cleanup.copy_interval_ms == 600_000  # the topic's interval, not the 1 h default
    assert through_jobs == in_process
    # The in-process runs were real: copied, then trimmed behind the tier with the topic's interval.
    status = report.plan.topic_status[f"{ns}/{topic}"]
    assert status.last_cleanup is not None and status.last_cleanup.result == "Succeeded", status
