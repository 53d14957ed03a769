"""Job manifests the operator creates: deterministic names, labels, owner, read-only claim on the broker's
node, restricted security, configured resources; results read back from termination messages."""

from __future__ import annotations

import json

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.reconcile.planner import CleanupAction, CopyAction, TopicPartitions
from tierkeeper_operator.jobs import (
    ANNOTATION_WORK,
    LABEL_BROKER,
    LABEL_KIND,
    Owner,
    cleanup_job,
    copy_job,
    job_name,
    job_state,
    termination_message,
    work_of,
)

CLUSTER = KafkaClusterConfig.model_validate(
    {
        "name": "c",
        "bootstrapServers": "k:9092",
        "remote": {
            "url": "s3://b/p",
            "storageOptions": {"client_kwargs": {"endpoint_url": "http://m:9000"}},
            "storageOptionsSecretRef": {"name": "s3"},
        },
        "jobs": {"image": "reg/tierkeeper:1", "backoffLimit": 2, "ttlSecondsAfterFinished": 60},
    }
)
BROKER = TieredBrokerSpec.model_validate(
    {
        "clusterRef": {"name": "c"},
        "brokerId": 2,
        "logDir": {"claimName": "data-2", "mountPath": "/var/lib/kafka", "path": "/var/lib/kafka/log0"},
    }
)
OWNER = Owner("TieredBroker", "broker-2", "kafka", "uid-2")
ACTION = CopyAction("c", 2, "kafka/broker-2", (TopicPartitions("kafka/orders", "orders", (0, 3)),))


def test_copy_job_manifest() -> None:
    job = copy_job(ACTION, CLUSTER, BROKER, OWNER, "node-a", "20260301T120000")
    spec = job["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert job["metadata"]["name"] == job_name("copy", "broker-2", "20260301T120000")
    assert job["metadata"]["labels"][LABEL_KIND] == "copy" and job["metadata"]["labels"][LABEL_BROKER] == "2"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-2"
    assert spec["backoffLimit"] == 2 and spec["ttlSecondsAfterFinished"] == 60
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "node-a"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["image"] == "reg/tierkeeper:1"
    assert container["envFrom"] == [{"secretRef": {"name": "s3"}}]
    args = container["args"]
    assert (
        args[0] == "copy" and "--assignment" in args and args[args.index("--assignment") + 1] == "orders=0,3"
    )
    assert args[args.index("--log-dir") + 1] == "/var/lib/kafka/log0"
    assert args[args.index("--result-file") + 1] == container["terminationMessagePath"]
    option = args[args.index("--storage-option") + 1]
    assert option == 'client_kwargs={"endpoint_url":"http://m:9000"}'
    claim = next(v for v in pod["volumes"] if v["name"] == "log-dir")
    assert claim["persistentVolumeClaim"] == {"claimName": "data-2", "readOnly": True}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "log-dir")
    assert mount == {"name": "log-dir", "mountPath": "/var/lib/kafka", "readOnly": True}
    assert work_of(job) == [("kafka/orders", "orders", [0, 3])]


def test_names_are_deterministic_and_short() -> None:
    a = job_name("copy", "b" * 60, "r1")
    assert a == job_name("copy", "b" * 60, "r1") != job_name("copy", "b" * 60, "r2")
    assert len(a) <= 52


def test_cleanup_job_manifest() -> None:
    spec = TieredTopicSpec.model_validate({"clusterRef": {"name": "c"}, "topic": "orders"})
    job = cleanup_job(
        CleanupAction("c", "kafka/orders", "orders", spec),
        CLUSTER,
        Owner("TieredTopic", "orders", "kafka", "u"),
        "r",
    )
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:5] == ["cleanup", "--bootstrap-servers", "k:9092", "--topic", "orders"]
    assert args[args.index("--local-retention-ms") + 1] == str(spec.local_retention_ms)
    assert json.loads(job["metadata"]["annotations"][ANNOTATION_WORK]) == [["kafka/orders", "orders", []]]


def test_job_state_and_termination_message() -> None:
    assert job_state({"status": {}}) == "Running"
    assert job_state({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}) == "Succeeded"
    assert job_state({"status": {"conditions": [{"type": "Failed", "status": "True"}]}}) == "Failed"
    pods = [
        {
            "status": {
                "containerStatuses": [
                    {
                        "name": "tierkeeper",
                        "state": {"terminated": {"finishedAt": "2026-01-01T00:00:01Z", "message": "old"}},
                    }
                ]
            }
        },
        {
            "status": {
                "containerStatuses": [
                    {
                        "name": "tierkeeper",
                        "state": {"terminated": {"finishedAt": "2026-01-01T00:00:09Z", "message": "new"}},
                    }
                ]
            }
        },
    ]
    assert termination_message(pods) == "new"
    assert termination_message([]) is None
