"""Two real operator processes (``python -m tierkeeper_operator``, kopf peering on) against the harness's
control plane, one real Kafka broker and moto S3.

- The older replica is active: it creates the copy Job; the younger one is a standby (kopf paused, no
  rounds) and creates nothing. Both serve liveness (kopf) and readiness (ready: active after a round,
  or standby).
- The copy Job is held inside ``tierkeeper copy`` by the fault hook (``copy.segment.started:stop``, the
  process stops itself), so the operator is killed (SIGKILL) while its Job runs, whatever the speed.
- The standby takes over once the killed one's keep-alive expires: it runs rounds, creates no second
  copy Job for the broker while the first runs, and when the Job is let go, records its result in the
  TieredTopic status exactly once.
- ``/metrics`` on the survivor: Jobs by kind and result, tiered bytes and segments, copy lag, Stalled
  resources (a compacted topic), reconciles by kind and the round duration histogram change as the
  topic is copied; per-topic series only where ``--metrics-topic-labels`` asked for them.
- The killed replica restarted comes back as a standby (it is now the younger one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from k8s_helpers import produce, wait_for
from prometheus_client.parser import text_string_to_metric_families
from test_k8s_operator_real import moto_remote, resource, tier_storage, tiered_broker_spec

from harness.control_plane import ControlPlane
from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from harness.ports import free_ports
from tierkeeper_operator.jobs import ANNOTATION_CREATED_BY, ANNOTATION_RECORDED, LABEL_KIND

DEADLINE = 240.0  # operator and Job processes start Python on a busy 2-core machine
API = "/apis/tierkeeper.io/v1alpha1/namespaces"


@dataclass
class OperatorProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    liveness: str
    readiness: str
    metrics: str

    def get(self, url: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return int(answer.status), answer.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def ready(self) -> dict[str, Any]:
        code, body = self.get(self.readiness)
        try:
            answer: dict[str, Any] = json.loads(body)
        except ValueError:
            return {"code": code, "body": body}
        return {"code": code, **answer}

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        code, body = self.get(self.metrics)
        assert code == 200, body
        out = {}
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return out

    def metric(self, metric: str, /, **labels: str) -> float:
        return self.samples().get((metric, tuple(sorted(labels.items()))), 0.0)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@pytest.fixture
def operators(k8s_crds: ControlPlane, tmp_path: Path) -> Iterator[tuple[list[OperatorProcess], Any]]:
    started: list[OperatorProcess] = []

    def start(name: str, namespace: str, cluster_file: Path, *extra: str) -> OperatorProcess:
        live, ready, metrics = free_ports(3)
        log = tmp_path / f"{name}.log"
        env = {**os.environ, "KUBECONFIG": str(k8s_crds.kubeconfig), "POD_ID": name}
        argv = [
            sys.executable,
            "-m",
            "tierkeeper_operator",
            "--namespace",
            namespace,
            "--cluster",
            str(cluster_file),
            "--reconcile-interval",
            "1",
            "--peering-lifetime",
            "10",
            "--liveness",
            f"http://127.0.0.1:{live}/healthz",
            "--readiness",
            f"http://127.0.0.1:{ready}/readyz",
            "--metrics-port",
            str(metrics),
            *extra,
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        started.append(
            OperatorProcess(
                name,
                proc,
                log,
                f"http://127.0.0.1:{live}/healthz",
                f"http://127.0.0.1:{ready}/readyz",
                f"http://127.0.0.1:{metrics}/metrics",
            )
        )
        return started[-1]

    try:
        yield started, start
    finally:
        for op in started:
            if op.proc.poll() is None:
                op.proc.send_signal(signal.SIGTERM)
                try:
                    op.proc.wait(30)
                except subprocess.TimeoutExpired:
                    op.proc.kill()
                    op.proc.wait()


def jobs_of(plane: ControlPlane, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    return items


def test_two_replicas_one_active_takeover_after_kill_mid_job_and_metrics(
    k8s_crds: ControlPlane,
    k8s_namespace: str,
    kafka_broker: KafkaCluster,
    moto_server: MotoServer,
    operators: tuple[list[OperatorProcess], Any],
    tmp_path: Path,
) -> None:
    plane, ns, kafka = k8s_crds, k8s_namespace, kafka_broker
    _, start = operators
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    compacted = f"compacted-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    futures = admin.create_topics(
        [
            NewTopic(topic, 1, 1, config={"internal.segment.bytes": str(64 * 1024), "retention.ms": "-1"}),
            NewTopic(compacted, 1, 1, config={"cleanup.policy": "compact"}),
        ]
    )
    for future in futures.values():
        future.result(60)
    kafka.wait_topic(topic, 1)
    produce(kafka, topic, 2000)

    # The Jobs' environment comes from this Secret; the fault hook stops `tierkeeper copy` at its first
    # segment, so the copy Job is running for as long as the test wants.
    bucket, options = tier_storage(
        plane, ns, kafka, moto_server, job_env={"TIERKEEPER_FAULT": "copy.segment.started:1:stop"}
    )
    cluster = {
        "name": "local",
        "bootstrapServers": kafka.bootstrap_servers,
        "remote": moto_remote(bucket, options),
        "jobs": {"image": "tierkeeper", "ttlSecondsAfterFinished": 600, "backoffLimit": 0},
    }
    cluster_file = tmp_path / "local.yaml"
    cluster_file.write_text(yaml.safe_dump(cluster))
    (broker,) = kafka.node_ids
    plane.request(
        "POST",
        f"{API}/{ns}/tieredbrokers",
        resource(
            "TieredBroker",
            f"broker-{broker}",
            tiered_broker_spec("local", broker, plane.kubelet.node_names[0]),
        ),
    )
    for name, kafka_topic in (("orders", topic), ("compacted", compacted)):
        plane.request(
            "POST",
            f"{API}/{ns}/tieredtopics",
            resource(
                "TieredTopic",
                name,
                {
                    "clusterRef": {"name": "local"},
                    "topic": kafka_topic,
                    "localRetentionMs": -1,
                    "localRetentionBytes": 128 * 1024,
                    "copy": {"intervalSeconds": 3600},  # one copy Job in this test
                },
            ),
        )

    # Replica A starts first (older: higher default priority) and is active.
    a = start("op-a", ns, cluster_file)
    wait_for(lambda: a.ready().get("role") == "active" and a.ready()["code"] == 200, "A active", DEADLINE)
    b = start("op-b", ns, cluster_file, "--metrics-topic-labels")
    standby = wait_for(
        lambda: "higher priority" in (r := b.ready()).get("detail", "") and r, "B standby", DEADLINE
    )
    assert standby["role"] == "standby", standby
    assert standby["code"] == 200 and standby["ready"] is True, standby  # a standby is ready

    def copy_job() -> dict[str, Any] | None:
        found = [j for j in jobs_of(plane, ns) if j["metadata"]["labels"][LABEL_KIND] == "copy"]
        return found[0] if found else None

    job = wait_for(copy_job, "A's copy Job", DEADLINE)
    job_name = job["metadata"]["name"]
    assert job["metadata"]["annotations"][ANNOTATION_CREATED_BY] == "op-a"

    def stopped_pid() -> int | None:
        pods = plane.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name%3D{job_name}")
        for pod in pods["items"]:
            try:
                pid = plane.kubelet.pid_of(ns, pod["metadata"]["name"], "tierkeeper")
            except Exception:  # noqa: BLE001 - not started yet
                continue
            state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].split()[0]
            if state == "T":  # stopped at the fault point: the copy has begun and cannot finish
                return pid
        return None

    pid = wait_for(stopped_pid, "the copy Job's process to stop at copy.segment.started", DEADLINE)
    # Both replicas answer liveness; only A has started a Job; B keeps to itself.
    for op in (a, b):
        code, body = op.get(op.liveness)
        assert code == 200 and "rounds" in json.loads(body), body
    assert a.metric("tierkeeper_jobs_started_total", kind="copy") == 1
    assert b.metric("tierkeeper_jobs_started_total", kind="copy") == 0
    assert b.metric("tierkeeper_active") == 0 and a.metric("tierkeeper_active") == 1
    assert not any(name.startswith("tierkeeper_topic_") for name, _ in a.samples())  # opt-in only

    # Kill A while its Job runs; B takes over once A's keep-alive expires.
    a.proc.kill()
    a.proc.wait()
    wait_for(lambda: b.ready().get("role") == "active", "B to take over", DEADLINE)
    rounds_then = b.ready()["rounds"]
    wait_for(lambda: b.ready()["rounds"] >= rounds_then + 3, "B to run three rounds", DEADLINE)
    # B's rounds see the running Job: no second copy Job for the broker, nothing recorded yet.
    assert [j["metadata"]["name"] for j in jobs_of(plane, ns)] == [job_name], b.tail()
    # Copy lag is what the last finished copy saw on the leader (the operator never reads log dirs):
    # nothing is known before the first copy.
    assert b.metric("tierkeeper_copy_lag_segments", cluster="local") == 0
    assert b.metric("tierkeeper_tiered_segments", cluster="local") == 0
    assert b.metric("tierkeeper_tiered_bytes", cluster="local") == 0
    assert b.metric("tierkeeper_stalled_resources", kind="TieredTopic") == 1  # the compacted topic
    assert b.metric("tierkeeper_reconciles_total", kind="TieredTopic") >= 6
    assert b.metric("tierkeeper_reconcile_duration_seconds_count") >= 3
    assert b.metric("tierkeeper_jobs_total", kind="copy", result="Succeeded") == 0

    os.killpg(pid, signal.SIGCONT)  # let the copy finish

    def recorded() -> dict[str, Any] | None:
        obj = plane.request("GET", f"{API}/{ns}/tieredtopics/orders")
        last = (obj.get("status") or {}).get("lastCopy") or {}
        return obj if last.get("job") == job_name else None

    obj = wait_for(recorded, "the copy Job's result in the TieredTopic status", DEADLINE)
    assert obj["status"]["lastCopy"]["result"] == "Succeeded", obj["status"]
    assert obj["status"]["remote"]["segments"] > 0, obj["status"]
    finished = next(j for j in jobs_of(plane, ns) if j["metadata"]["name"] == job_name)
    assert finished["metadata"]["annotations"][ANNOTATION_RECORDED] == "true"
    copies = [j for j in jobs_of(plane, ns) if j["metadata"]["labels"][LABEL_KIND] == "copy"]
    assert len(copies) == 1, [j["metadata"]["name"] for j in copies]
    wait_for(
        lambda: b.metric("tierkeeper_tiered_segments", cluster="local") > 0,
        "the metrics to show the copy",
        DEADLINE,
    )
    status = plane.request("GET", f"{API}/{ns}/tieredtopics/orders")["status"]
    assert b.metric("tierkeeper_copy_lag_bytes", cluster="local") == status["copyLag"]["bytes"]
    assert b.metric("tierkeeper_copy_lag_segments", cluster="local") == status["copyLag"]["segments"]
    per_topic = b.metric("tierkeeper_topic_copy_lag_bytes", namespace=ns, name="orders")
    assert per_topic == status["copyLag"]["bytes"]
    assert b.metric("tierkeeper_jobs_total", kind="copy", result="Succeeded") == 1
    assert b.metric("tierkeeper_tiered_bytes", cluster="local") > 0
    assert b.metric("tierkeeper_topic_tiered_segments", namespace=ns, name="orders") > 0
    # Any Job after the takeover (the cleanup that follows the first copy) is B's.
    later = [j for j in jobs_of(plane, ns) if j["metadata"]["name"] != job_name]
    assert all(j["metadata"]["annotations"][ANNOTATION_CREATED_BY] == "op-b" for j in later), later

    # A restarted is the younger replica now: a standby.
    a2 = start("op-a2", ns, cluster_file)
    again = wait_for(lambda: (r := a2.ready()).get("role") == "standby" and r, "A again as standby", DEADLINE)
    assert again["code"] == 200, again
    assert b.ready()["role"] == "active"
