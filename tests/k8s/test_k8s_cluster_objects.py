"""The objects the operator keeps for a TieredCluster, on the harness's real API server, written under the
chart's own RBAC (so the grants of rbac.py are enough, server-side apply's create included):

- Strimzi: with Strimzi's CRDs (../shared/strimzi) served and the objects Strimzi's operator would leave (a
  ``Kafka`` with status.listeners, a KafkaNodePool with status.nodeIds, broker pods, claims bound to
  volumes holding each broker's ``kafka-log<id>`` dir, broker 1's being a running Kafka broker's log
  dir), the broker nodes get TieredBrokers the API server accepts; the pool scaled 3 -> 4 gets a
  fourth, a user's own TieredBroker wins, scaled down loses one.
- The gateway: its objects are accepted in a namespace enforcing the restricted Pod Security profile, its
  Deployment's pod (run by the process kubelet) serves a tiered topic's history to a consumer, broker ports
  follow the brokers, and disabling the gateway deletes its objects. The harness has no kube-proxy and no
  endpoints controller, so nothing here connects to the Service's cluster IP: the consumer connects to the
  pod's ports on loopback (the process kubelet runs pods on the host's network). What the test does prove
  of the Service is the part a kube-proxy would take from it: its selector picks the gateway pod, and every
  port's targetPort, resolved against the pod as the endpoints controller resolves it (a number as is, a
  name through the container's named ports), is a port the pod listens on and answers in that port's
  protocol (ApiVersions of the project's own codec on the bootstrap and broker ports, Prometheus text on
  metrics). Not proven here: cluster-IP routing, NodePort/LoadBalancer allocation beyond the API server's
  acceptance, and reaching the pod from another pod through the NetworkPolicy (no CNI enforces it).
"""

from __future__ import annotations

import base64
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from test_k8s_operator_real import chart_rbac

from harness.control_plane import ControlPlane
from harness.gateway import free_port_block, tier_and_trim
from harness.k8s import wait_until
from harness.kafka import KafkaCluster
from harness.kube_rest import ApiError
from harness.moto_s3 import MotoServer
from harness.paths import strimzi_dir
from storage_core.adapters.kafka_features import read_features
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.cluster_parts import GatewaySpec, StrimziRef
from storage_core.api.resources import TieredBrokerSpec
from storage_core.reconcile.planner import CopyAction, TopicPartitions
from tierkeeper_operator.cluster_objects import sync_gateway, sync_strimzi_brokers
from tierkeeper_operator.gateway_objects import gateway_name, gateway_objects
from tierkeeper_operator.job_kinds import copy_job, rebuild_job
from tierkeeper_operator.jobs import Owner
from tierkeeper_operator.kube import Kube
from tierkeeper_operator.settings import GatewaySettings

STRIMZI = strimzi_dir()
KAFKA = "my-cluster"
POOL = "broker"


# ---- Strimzi ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def strimzi_crds(k8s_crds: ControlPlane) -> ControlPlane:
    files = ("040-Crd-kafka.yaml", "045-Crd-kafkanodepool.yaml")
    missing = [f for f in files if not (STRIMZI / f).exists()]
    assert not missing, f"Strimzi's CRDs {missing} are not in {STRIMZI} (see its README.md)"
    k8s_crds.apply_crds([yaml.safe_load((STRIMZI / f).read_text()) for f in files])
    return k8s_crds


@pytest.fixture
def ns(strimzi_crds: ControlPlane) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    strimzi_crds.create_namespace(name)
    try:
        yield name
    finally:
        strimzi_crds.request("DELETE", f"/api/v1/namespaces/{name}")


def owner_cluster(plane: ControlPlane, ns: str, name: str = "tiered") -> Owner:
    """A TieredTopic named like the TieredCluster stands in for it as the owner: a Tierkeeper object the
    garbage collector resolves (an owner it could not find would have it delete the objects)."""
    body = {
        "apiVersion": "tierkeeper.io/v1alpha1",
        "kind": "TieredTopic",
        "metadata": {"name": name},
        "spec": {"clusterRef": {"name": name}, "topic": name, "paused": True},
    }
    made = plane.request("POST", f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredtopics", body)
    return Owner("TieredTopic", name, ns, made["metadata"]["uid"])


def strimzi_kafka(
    plane: ControlPlane, ns: str, broker_ids: tuple[int, ...] = (1, 2, 3), example: str = "kafka-persistent"
) -> None:
    with open(STRIMZI / f"example-{example}.yaml") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kafka = next(d for d in docs if d["kind"] == "Kafka")
    base = f"/apis/kafka.strimzi.io/v1/namespaces/{ns}"
    made = plane.request("POST", f"{base}/kafkas", kafka)
    made["status"] = {
        "listeners": [
            {"name": "plain", "bootstrapServers": f"{KAFKA}-kafka-bootstrap.{ns}.svc:9092"},
            {"name": "tls", "bootstrapServers": f"{KAFKA}-kafka-bootstrap.{ns}.svc:9093"},
        ],
        "kafkaNodePools": [{"name": "controller"}, {"name": POOL}],
    }
    plane.request("PUT", f"{base}/kafkas/{KAFKA}/status", made)
    for pool in (d for d in docs if d["kind"] == "KafkaNodePool"):
        made = plane.request("POST", f"{base}/kafkanodepools", pool)
        ids = [10, 11, 12] if pool["metadata"]["name"] == "controller" else list(broker_ids)
        made["status"] = {"nodeIds": ids, "roles": pool["spec"]["roles"], "replicas": len(ids)}
        plane.request("PUT", f"{base}/kafkanodepools/{pool['metadata']['name']}/status", made)


def broker_node(
    plane: ControlPlane,
    ns: str,
    node: int,
    root: Path,
    log_dir: Path | None = None,
    volumes: tuple[int, ...] = (0,),
    pool: str = POOL,
) -> None:
    """What Strimzi leaves for broker ``node`` of ``pool``: a claim ``data-<id>-<pod>`` per JBOD volume,
    bound to a volume whose directory holds the broker's log dir ``kafka-log<node>`` (``log_dir``: a
    running broker's, linked into the first), and the pod mounting each at /var/lib/kafka/data-<id> (never
    run here: its scheduler is none the harness has)."""
    pod_name = f"{KAFKA}-{pool}-{node}"
    for i in volumes:
        claim = f"data-{i}-{pod_name}"
        volume = root / claim
        volume.mkdir(parents=True)
        if log_dir is None or i != volumes[0]:
            (volume / f"kafka-log{node}").mkdir()
        else:
            (volume / f"kafka-log{node}").symlink_to(log_dir)
        pv_name = f"{ns}-{claim}"
        plane.request(
            "POST",
            "/api/v1/persistentvolumes",
            {
                "metadata": {"name": pv_name},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "hostPath": {"path": str(volume)},
                    "claimRef": {"namespace": ns, "name": claim},
                    "storageClassName": "",
                },
            },
        )
        plane.request(
            "POST",
            f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
            {
                "metadata": {"name": claim, "labels": {"strimzi.io/cluster": KAFKA}},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                    "volumeName": pv_name,
                    "storageClassName": "",
                },
            },
        )
    labels = {
        "strimzi.io/cluster": KAFKA,
        "strimzi.io/pool-name": pool,
        "strimzi.io/broker-role": "true",
        "strimzi.io/kind": "Kafka",
    }
    pod = {
        "metadata": {"name": pod_name, "labels": labels},
        "spec": {
            "schedulerName": "strimzi-test-unscheduled",
            "containers": [
                {
                    "name": "kafka",
                    "image": "quay.io/strimzi/kafka:latest",
                    "volumeMounts": [
                        {"name": f"data-{i}", "mountPath": f"/var/lib/kafka/data-{i}"} for i in volumes
                    ],
                }
            ],
            "volumes": [
                {"name": f"data-{i}", "persistentVolumeClaim": {"claimName": f"data-{i}-{pod_name}"}}
                for i in volumes
            ],
        },
    }
    plane.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)


def tiered_brokers(plane: ControlPlane, ns: str) -> dict[str, dict[str, Any]]:
    items = plane.request("GET", f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredbrokers")["items"]
    return {b["metadata"]["name"]: b for b in items}


def bound_log_dir(plane: ControlPlane, ns: str, broker: dict[str, Any], extra: int | None = None) -> Path:
    """The host directory the TieredBroker's logDir.path (or extraLogDirs[extra].path) is, through its
    claim's volume."""
    log_dir = broker["spec"]["logDir"] if extra is None else broker["spec"]["extraLogDirs"][extra]
    pvc = plane.request("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{log_dir['claimName']}")
    pv = plane.request("GET", f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
    relative = Path(log_dir["path"]).relative_to(log_dir["mountPath"])
    return Path(pv["spec"]["hostPath"]["path"]) / relative


def test_strimzi_brokers_become_tiered_brokers_and_follow_the_pool(
    strimzi_crds: ControlPlane, ns: str, tmp_path: Path, kafka_broker: KafkaCluster
) -> None:
    """Broker 1 is the harness's running Kafka broker (node id 1): its claim's volume holds that broker's
    real log dir, so the TieredBroker kept for it reaches the log dir Kafka writes."""
    plane = strimzi_crds
    strimzi_kafka(plane, ns)
    broker_node(plane, ns, 1, tmp_path, log_dir=kafka_broker.log_dir(1))
    for node in (2, 3):
        broker_node(plane, ns, node, tmp_path)
    owner = owner_cluster(plane, ns)
    kube = Kube(plane.api_client(token=chart_rbac(plane, ns)), (ns,))
    ref = StrimziRef(kafka=KAFKA, listener="plain")

    state = sync_strimzi_brokers(kube, ref, ns, owner)
    assert state.bootstrap_servers == f"{KAFKA}-kafka-bootstrap.{ns}.svc:9092"
    assert state.problems == []
    made = tiered_brokers(plane, ns)
    assert sorted(made) == [f"{KAFKA}-{POOL}-{n}" for n in (1, 2, 3)]
    for name, broker in made.items():
        node = int(name.rsplit("-", 1)[1])
        assert broker["spec"]["brokerId"] == node and broker["spec"]["clusterRef"] == {"name": "tiered"}
        assert broker["spec"]["placement"] == {"podName": name}
        assert broker["metadata"]["ownerReferences"][0]["uid"] == owner.uid
        assert bound_log_dir(plane, ns, broker) == tmp_path / f"data-0-{name}" / f"kafka-log{node}"
        assert bound_log_dir(plane, ns, broker).is_dir()
    real = (bound_log_dir(plane, ns, made[f"{KAFKA}-{POOL}-1"]) / "meta.properties").read_text()
    assert "node.id=1" in real.splitlines()
    versions = {name: b["metadata"]["resourceVersion"] for name, b in made.items()}
    again = sync_strimzi_brokers(kube, ref, ns, owner)
    assert again.changes.create == again.changes.update == again.changes.delete == []
    assert {n: b["metadata"]["resourceVersion"] for n, b in tiered_brokers(plane, ns).items()} == versions

    # Strimzi scales the pool 3 -> 4: node 4 gets its claim, pod and a place in status.nodeIds.
    broker_node(plane, ns, 4, tmp_path)
    path = f"/apis/kafka.strimzi.io/v1/namespaces/{ns}/kafkanodepools/{POOL}"
    pool = plane.request("GET", path)
    pool["spec"]["replicas"] = 4
    pool = plane.request("PUT", path, pool)
    pool["status"]["nodeIds"] = [1, 2, 3, 4]
    plane.request("PUT", f"{path}/status", pool)
    sync_strimzi_brokers(kube, ref, ns, owner)
    four = tiered_brokers(plane, ns)
    assert sorted(four) == [f"{KAFKA}-{POOL}-{n}" for n in (1, 2, 3, 4)]
    assert bound_log_dir(plane, ns, four[f"{KAFKA}-{POOL}-4"]).is_dir()

    # A TieredBroker written by hand for node 2 wins: the operator's one goes, the user's stays.
    users = {
        "apiVersion": "tierkeeper.io/v1alpha1",
        "kind": "TieredBroker",
        "metadata": {"name": "mine-2"},
        "spec": {
            "clusterRef": {"name": "tiered"},
            "brokerId": 2,
            "logDir": {
                "claimName": f"data-0-{KAFKA}-{POOL}-2",
                "mountPath": "/data",
                "path": "/data/kafka-log2",
            },
        },
    }
    plane.request("POST", f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredbrokers", users)
    state = sync_strimzi_brokers(kube, ref, ns, owner)
    assert state.changes.users == [2]
    assert sorted(tiered_brokers(plane, ns)) == ["mine-2", *(f"{KAFKA}-{POOL}-{n}" for n in (1, 3, 4))]

    # Scaled down to node 1 only: the operator's TieredBrokers of 3 and 4 go, never the user's.
    pool = plane.request("GET", path)
    pool["status"]["nodeIds"] = [1]
    plane.request("PUT", f"{path}/status", pool)
    sync_strimzi_brokers(kube, ref, ns, owner)
    assert sorted(tiered_brokers(plane, ns)) == ["mine-2", f"{KAFKA}-{POOL}-1"]


def test_a_jbod_pools_brokers_get_every_volume_and_their_jobs_are_accepted(
    strimzi_crds: ControlPlane, ns: str, tmp_path: Path
) -> None:
    """Strimzi's JBOD example (two persistent volumes per broker): each broker's TieredBroker names both
    claims and log dirs, bound to the volumes Strimzi's claims are; the copy and rebuild Jobs built from
    the stored TieredBroker pass the API server's validation (dry run) with both claims mounted."""
    plane = strimzi_crds
    strimzi_kafka(plane, ns, example="kafka-jbod")
    for node in (1, 2, 3):
        broker_node(plane, ns, node, tmp_path, volumes=(0, 1))
    owner = owner_cluster(plane, ns)
    kube = Kube(plane.api_client(token=chart_rbac(plane, ns)), (ns,))
    state = sync_strimzi_brokers(kube, StrimziRef(kafka=KAFKA, listener="plain"), ns, owner)
    assert state.problems == []
    made = tiered_brokers(plane, ns)
    assert sorted(made) == [f"{KAFKA}-{POOL}-{n}" for n in (1, 2, 3)]
    for name, broker in made.items():
        node = int(name.rsplit("-", 1)[1])
        assert bound_log_dir(plane, ns, broker) == tmp_path / f"data-0-{name}" / f"kafka-log{node}"
        assert bound_log_dir(plane, ns, broker, extra=0) == tmp_path / f"data-1-{name}" / f"kafka-log{node}"
        assert bound_log_dir(plane, ns, broker, extra=0).is_dir()

    spec = TieredBrokerSpec.model_validate(made[f"{KAFKA}-{POOL}-2"]["spec"])
    cluster = KafkaClusterConfig.model_validate(
        {"name": "tiered", "bootstrapServers": "k:9092", "remote": {"url": "s3://b/t"}}
    )
    job_owner = Owner("TieredBroker", f"{KAFKA}-{POOL}-2", ns, made[f"{KAFKA}-{POOL}-2"]["metadata"]["uid"])
    action = CopyAction("tiered", 2, f"{ns}/b2", (TopicPartitions(f"{ns}/t", "t", (0,)),))
    for job in (
        copy_job(action, cluster, spec, job_owner, None, "r"),
        rebuild_job(spec, cluster, job_owner, None, "r"),
    ):
        accepted = plane.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs?dryRun=All", job)
        pod = accepted["spec"]["template"]["spec"]
        claims = [
            v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
        ]
        assert claims == [f"data-0-{KAFKA}-{POOL}-2", f"data-1-{KAFKA}-{POOL}-2"]
        mounts = [
            m["mountPath"] for m in pod["containers"][0]["volumeMounts"] if m["name"].startswith("log-dir")
        ]
        assert mounts == ["/var/lib/kafka/data-0", "/var/lib/kafka/data-1"]


def test_a_missing_listener_is_one_line(strimzi_crds: ControlPlane, ns: str) -> None:
    plane = strimzi_crds
    strimzi_kafka(plane, ns)
    kube = Kube(plane.api_client(token=chart_rbac(plane, ns)), (ns,))
    state = sync_strimzi_brokers(
        kube, StrimziRef(kafka=KAFKA, listener="external"), ns, owner_cluster(plane, ns)
    )
    assert state.bootstrap_servers is None
    assert (
        state.problems[0]
        == f"Kafka {KAFKA}: no listener 'external' in status.listeners (listeners: plain, tls)"
    )
    gone = sync_strimzi_brokers(kube, StrimziRef(kafka="nope"), ns, owner_cluster(plane, ns, "other"))
    assert gone.problems == ["Strimzi Kafka 'nope' not found in the namespace"]


# ---- the gateway -----------------------------------------------------------------------------------

TOPIC_RECORDS = 400


def produce_and_tier(kafka: KafkaCluster, remote: str, options: dict[str, Any], moto: MotoServer) -> str:
    topic = f"gw-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    config = {"internal.segment.bytes": "16384", "retention.ms": "-1"}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(60)
    kafka.wait_topic(topic, 1)
    # Idempotent: read_all's values are compared in produce order, which a retried batch could break.
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 0, "enable.idempotence": True}
    )
    for n in range(TOPIC_RECORDS):
        producer.produce(topic, value=f"record-{n:05d}-".encode() + b"x" * 200)
        if n % 50 == 49:
            producer.flush(30)
    assert producer.flush(30) == 0
    flags = ["--remote", remote, "--endpoint-url", moto.endpoint_url, "--path-style"]
    env = {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]}
    tier_and_trim(kafka, flags, topic, env=env)
    low, _ = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "x"}).get_watermark_offsets(
        TopicPartition(topic, 0), timeout=30
    )
    assert low > 0, "the trim left the history on the broker; the test would not read from the tier"
    return topic


def read_all(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 180
    try:
        while len(values) < TOPIC_RECORDS and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def assert_service_reaches_pod(svc: dict[str, Any], pod: dict[str, Any]) -> None:
    """What a kube-proxy would need of the Service: its selector picks ``pod``, and each port's targetPort
    (a number, or a container port's name) is listened on by the pod, answering in the port's protocol."""
    labels = pod["metadata"].get("labels") or {}
    assert svc["selector"].items() <= labels.items(), (svc["selector"], labels)
    named = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    for port in svc["ports"]:
        target = port.get("targetPort", port["port"])
        number = named[target] if isinstance(target, str) else int(target)
        if port["name"] == "metrics":
            with urllib.request.urlopen(f"http://127.0.0.1:{number}/metrics", timeout=30) as answer:
                assert b"tierkeeper_gateway" in answer.read(), port
        else:
            assert read_features(f"127.0.0.1:{number}", {}, timeout=30).metadata_version == "4.1-IV1", port


def test_gateway_objects_run_and_serve_history_under_the_restricted_profile(
    k8s_crds: ControlPlane,
    kafka_broker: KafkaCluster,
    moto_server: MotoServer,
    s3_bucket: tuple[str, dict[str, Any]],
) -> None:
    plane = k8s_crds
    ns = f"t-{uuid.uuid4().hex[:10]}"
    plane.create_namespace(ns, labels={"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        remote, options = s3_bucket
        topic = produce_and_tier(kafka_broker, remote, options, moto_server)
        secret = {
            "metadata": {"name": "s3-credentials"},
            "data": {
                "AWS_ACCESS_KEY_ID": base64.b64encode(options["key"].encode()).decode(),
                "AWS_SECRET_ACCESS_KEY": base64.b64encode(options["secret"].encode()).decode(),
            },
        }
        plane.request("POST", f"/api/v1/namespaces/{ns}/secrets", secret)
        cluster = KafkaClusterConfig.model_validate(
            {
                "name": "tiered",
                "bootstrapServers": kafka_broker.bootstrap_servers,
                "remote": {
                    "url": remote,
                    "storageOptions": {
                        "client_kwargs": {"endpoint_url": moto_server.endpoint_url},
                        "config_kwargs": {"s3": {"addressing_style": "path"}},
                    },
                    "storageOptionsSecretRef": {"name": "s3-credentials"},
                },
                "jobs": {"image": "tierkeeper/pipeline:dev"},
            }
        )
        base = free_port_block(12)
        gateway = GatewaySpec.model_validate(
            {
                "enabled": True,
                "replicas": 1,  # every pod of the process kubelet shares the host's ports
                "bootstrapPort": base,
                "brokerPortBase": base,  # broker 1 at base + 1
                "advertisedHost": "127.0.0.1",
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
            }
        )
        settings = GatewaySettings(metrics_port=base + 11)
        owner = owner_cluster(plane, ns)
        kube = Kube(plane.api_client(token=chart_rbac(plane, ns)), (ns,))
        state = sync_gateway(kube, cluster, gateway, kafka_broker.node_ids, owner, settings)
        assert state.problem is None and state.bootstrap == f"127.0.0.1:{base}"

        name = gateway_name("tiered")

        def ready() -> int:
            return sync_gateway(kube, cluster, gateway, kafka_broker.node_ids, owner, settings).ready_replicas

        assert wait_until(ready, 180, 1.0) == 1, plane.request("GET", f"/api/v1/namespaces/{ns}/pods")
        (pod,) = plane.request(
            "GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=app.kubernetes.io/instance=tiered"
        )["items"]
        values = read_all(f"127.0.0.1:{base}", topic)
        assert values == [f"record-{n:05d}-".encode() + b"x" * 200 for n in range(TOPIC_RECORDS)], (
            plane.kubelet.logs(ns, pod["metadata"]["name"], "gateway")[-3000:]
        )

        service = f"/api/v1/namespaces/{ns}/services/{name}"
        svc = plane.request("GET", service)["spec"]
        ports = {p["name"]: p["port"] for p in svc["ports"]}
        assert ports == {"bootstrap": base, "broker-1": base + 1, "metrics": base + 11}
        assert_service_reaches_pod(svc, pod)
        deployment = plane.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")
        # A broker joins, then leaves: the Service's ports follow, the pod template stays (no rollout).
        sync_gateway(kube, cluster, gateway, [1, 4], owner, settings)
        ports = {p["name"]: p["port"] for p in plane.request("GET", service)["spec"]["ports"]}
        assert ports == {"bootstrap": base, "broker-1": base + 1, "broker-4": base + 4, "metrics": base + 11}
        sync_gateway(kube, cluster, gateway, [1], owner, settings)
        ports = {p["name"]: p["port"] for p in plane.request("GET", service)["spec"]["ports"]}
        assert "broker-4" not in ports
        policy = plane.request("GET", f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{name}")
        assert [p["port"] for p in policy["spec"]["ingress"][0]["ports"]] == [base, base + 1, base + 11]
        after = plane.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")
        assert after["metadata"]["generation"] == deployment["metadata"]["generation"]

        # Disabled: every object goes.
        off = sync_gateway(kube, cluster, gateway.model_copy(update={"enabled": False}), [1], owner, settings)
        assert off.bootstrap is None
        for path in (
            service,
            f"/apis/apps/v1/namespaces/{ns}/deployments/{name}",
            f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}",
            f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{name}",
        ):
            with pytest.raises(ApiError) as missing:
                plane.request("GET", path)
            assert missing.value.code == 404, path
    finally:
        plane.request("DELETE", f"/api/v1/namespaces/{ns}")


def test_the_default_gateway_is_two_replicas_spread_and_never_below_one_ready(k8s_crds: ControlPlane) -> None:
    """A TieredCluster that only turns the gateway on, as the API server stores it: the operator reads 2
    replicas (GatewaySpec's default; the CRD's description names it), and the objects for it are accepted
    in a namespace enforcing the restricted profile (dry run: two pods of the process kubelet would share
    the host's ports): a rolling update that adds a pod before it removes one, a PodDisruptionBudget
    letting one pod go at a time, and the replicas preferably on different nodes, every one advertising
    the Service's address."""
    plane = k8s_crds
    spec = {"bootstrapServers": "kafka:9092", "remote": {"url": "s3://b/t"}, "gateway": {"enabled": True}}
    body = {"apiVersion": "tierkeeper.io/v1alpha1", "kind": "TieredCluster", "metadata": {"name": "tiered"}}
    ns = f"t-{uuid.uuid4().hex[:10]}"
    plane.create_namespace(ns, labels={"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        path = f"/apis/tierkeeper.io/v1alpha1/namespaces/{ns}/tieredclusters"
        made = plane.request("POST", path, {**body, "spec": spec})
        gateway = GatewaySpec.model_validate(made["spec"]["gateway"])  # as the operator reads it
        assert gateway.replicas == 2
        cluster = KafkaClusterConfig.model_validate(
            {"name": "tiered", "bootstrapServers": "kafka:9092", "remote": {"url": "s3://b/t"}}
        )
        owner = Owner("TieredCluster", "tiered", ns, made["metadata"]["uid"])
        paths = {
            "Deployment": f"/apis/apps/v1/namespaces/{ns}/deployments",
            "Service": f"/api/v1/namespaces/{ns}/services",
            "PodDisruptionBudget": f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
            "NetworkPolicy": f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
        }
        accepted = {
            obj["kind"]: plane.request("POST", f"{paths[obj['kind']]}?dryRun=All&fieldValidation=Strict", obj)
            for obj in gateway_objects(cluster, gateway, [1, 2, 3], owner)
        }
        deployment = accepted["Deployment"]["spec"]
        assert deployment["replicas"] == 2
        assert deployment["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
        }
        pod = deployment["template"]
        (term,) = pod["spec"]["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        assert (
            term["podAffinityTerm"]["labelSelector"]["matchLabels"].items()
            <= pod["metadata"]["labels"].items()
        )
        budget = accepted["PodDisruptionBudget"]["spec"]
        assert budget["maxUnavailable"] == 1 and "minAvailable" not in budget
        assert budget["selector"] == deployment["selector"]
        args = pod["spec"]["containers"][0]["args"]
        assert args[args.index("--advertised-host") + 1] == f"{gateway_name('tiered')}.{ns}.svc"
        assert accepted["Service"]["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    finally:
        plane.request("DELETE", f"/api/v1/namespaces/{ns}")
