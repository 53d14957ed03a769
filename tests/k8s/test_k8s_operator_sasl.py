"""The operator against a real Kafka 4.1 broker that requires SASL/PLAIN, on the harness's control plane
with moto S3: its own Admin client reads the cluster's clientConfigSecretRef from a directory laid out
as the chart mounts the Secret into its pod (never through the Secrets API: it runs as the chart's
ClusterRole, which grants no Secrets), and its copy and cleanup Jobs get the same Secret mounted in their
namespace. Without the mount the TieredTopic is Stalled with one line and no Job starts; with it the
topic reaches Ready with a copy and a cleanup done on the SASL broker. The password appears nowhere:
not in the Jobs or pods, statuses, events, the operator's log or the Jobs' output.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from k8s_helpers import produce
from reliability.secret_scan import leaks, secret_volume
from test_k8s_operator_real import (
    DEADLINE,
    chart_rbac,
    kstatus,
    moto_remote,
    resource,
    tier_storage,
    tiered_broker_spec,
)

from harness.control_plane import ControlPlane
from harness.k8s import load_crds
from harness.kafka import KafkaCluster, SaslPlain
from harness.kafka_dist import HarnessError
from harness.moto_s3 import MotoServer
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.api.cluster import KafkaClusterConfig
from tierkeeper_operator.compose import build_reconciler
from tierkeeper_operator.jobs import KAFKA_CONFIG_DIR, LABEL_KIND
from tierkeeper_operator.kube import Kube
from tierkeeper_operator.settings import ClusterSettings, OperatorSettings

USER = "tierkeeper"
PASSWORD = "operator-Pa55word-4be1d07a"
MECHANISM = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}


def sasl_topic(kafka: KafkaCluster, topic: str) -> None:
    client = {"bootstrap.servers": kafka.bootstrap_servers, **kafka.client_config}
    config = {"internal.segment.bytes": str(64 * 1024), "retention.ms": "-1"}
    admin = AdminClient(client)  # kept referenced: a collected client fails its pending futures
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(60)
    kafka.wait_topic(topic, 1)
    produce(kafka, topic, 3000)


def test_operator_tiers_a_topic_on_a_sasl_broker_with_credentials_from_files(
    k8s_control_plane: ControlPlane,
    k8s_namespace: str,
    moto_server: MotoServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    plane, ns = k8s_control_plane, k8s_namespace
    plane.apply_crds(load_crds())
    kafka = KafkaCluster(tmp_path / "kafka", brokers=1, sasl=SaslPlain(USER, PASSWORD))
    try:
        kafka.start()
        sasl_topic(kafka, "orders")
        bucket, options = tier_storage(plane, ns, kafka, moto_server)
        # The Jobs' copy of the credentials: the Secret in their namespace, mounted by the kubelet.
        plane.request(
            "POST",
            f"/api/v1/namespaces/{ns}/secrets",
            {
                "metadata": {"name": "kafka-client"},
                "stringData": {"sasl.username": USER, "sasl.password": PASSWORD},
            },
        )
        cluster = KafkaClusterConfig.model_validate(
            {
                "name": "secure",
                "bootstrapServers": kafka.bootstrap_servers,
                "clientConfig": MECHANISM,
                "clientConfigSecretRef": {"name": "kafka-client"},
                "remote": moto_remote(bucket, options),
                "jobs": {"image": "tierkeeper", "ttlSecondsAfterFinished": 600, "backoffLimit": 0},
            }
        )
        node = plane.kubelet.node_names[0]
        broker_spec = tiered_broker_spec("secure", 1, node)
        base = f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}"
        plane.request("POST", f"{base}/tieredbrokers", resource("TieredBroker", "broker-1", broker_spec))
        topic_spec = {
            "clusterRef": {"name": "secure"},
            "topic": "orders",
            "localRetentionMs": -1,
            "localRetentionBytes": 128 * 1024,
        }
        plane.request("POST", f"{base}/tieredtopics", resource("TieredTopic", "orders", topic_spec))
        token = chart_rbac(plane, ns)

        # The Secret not mounted into the operator (wrong or missing path): Stalled, one line, no Job.
        absent = tmp_path / "not-mounted"
        unmounted = build_reconciler(
            Kube(plane.api_client(token=token), (ns,)),
            {"secure": cluster},
            OperatorSettings(clusters=ClusterSettings(kafka_config_dirs=(f"secure={absent}",))),
        )
        assert unmounted.run_round().created == []
        obj = plane.request("GET", f"{base}/tieredtopics/orders")
        stalled = {c["type"]: c for c in obj["status"]["conditions"]}["Stalled"]
        # A person must mount the Secret: Stalled (kstatus Failed), not retried as an unreachable Kafka.
        assert stalled["status"] == "True" and stalled["reason"] == "KafkaClientConfigInvalid", obj["status"]
        assert (
            stalled["message"]
            == f"cluster secure: clientConfigSecretRef kafka-client: directory {absent}: not a directory"
        )
        assert kstatus(obj) == "Failed"

        # Mounted (as the kubelet lays a Secret out): the operator talks to the SASL broker.
        mounted = secret_volume(tmp_path / "kafka-client", {"sasl.username": USER, "sasl.password": PASSWORD})
        reconciler = build_reconciler(
            Kube(plane.api_client(token=token), (ns,)),
            {"secure": cluster},
            OperatorSettings(clusters=ClusterSettings(kafka_config_dirs=(f"secure={mounted}",))),
        )
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            reconciler.run_round()
            obj = plane.request("GET", f"{base}/tieredtopics/orders")
            status = obj.get("status") or {}
            if status.get("lastCopy") and status.get("lastCleanup") and kstatus(obj) == "Current":
                break
            time.sleep(1)
        status = obj.get("status") or {}
        pods = plane.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        logs = {}
        for pod in pods:
            name = pod["metadata"]["name"]
            try:
                logs[name] = plane.kubelet.logs(ns, name, "tierkeeper")
            except HarnessError as exc:
                logs[name] = f"{exc}; status {pod.get('status')}"
        assert status.get("lastCopy", {}).get("result") == "Succeeded", (status, logs)
        assert status.get("lastCleanup", {}).get("result") == "Succeeded", (status, logs)
        assert {c["type"]: c["status"] for c in status["conditions"]} == {"Ready": "True"}
        assert status["remote"]["segments"] >= 2, status["remote"]
        start = KafkaAdmin(kafka.bootstrap_servers, kafka.client_config).log_start_offsets([("orders", 0)])
        assert 0 < start[("orders", 0)] <= status["remote"]["partitions"][0]["endOffset"] + 1, start

        # The Jobs got the credentials as a mounted Secret, read through --kafka-config-dir.
        jobs = plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
        assert sorted(j["metadata"]["labels"][LABEL_KIND] for j in jobs) == ["cleanup", "copy"]
        for job in jobs:
            spec = job["spec"]["template"]["spec"]
            assert {
                "name": "kafka-client",
                "secret": {"secretName": "kafka-client", "defaultMode": 420},
            } in spec["volumes"]
            args = spec["containers"][0]["args"]
            assert args[args.index("--kafka-config-dir") + 1] == KAFKA_CONFIG_DIR

        # Nothing captured holds the password.
        captured = {
            "jobs": json.dumps(jobs),
            "pods": json.dumps(pods),
            "tieredtopics": json.dumps(plane.request("GET", f"{base}/tieredtopics")),
            "tieredbrokers": json.dumps(plane.request("GET", f"{base}/tieredbrokers")),
            "events": json.dumps(plane.request("GET", f"/api/v1/namespaces/{ns}/events")),
            "operator log": caplog.text,
            "job output": json.dumps(logs),
        }
        leaked = {where: found for where, text in captured.items() if (found := leaks(text, [PASSWORD]))}
        assert leaked == {}
    finally:
        kafka.stop()
