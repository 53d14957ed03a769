"""Job manifests the operator creates: deterministic names, labels, owner, read-only claim on the broker's
node, restricted security, configured resources; results read back from termination messages."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from storage_core.api.cluster import KafkaClusterConfig, credential_like
from storage_core.api.parse import describe_errors
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.reconcile.planner import CleanupAction, CopyAction, TopicPartitions
from tierkeeper_operator.job_kinds import cleanup_job, copy_job, rebuild_job, tier_writers
from tierkeeper_operator.jobs import (
    ANNOTATION_WORK,
    KAFKA_CONFIG_DIR,
    LABEL_BROKER,
    LABEL_KIND,
    Owner,
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


def test_every_job_kind_has_one_row_and_its_jobs_carry_its_label() -> None:
    """The JobKind table is complete; each kind's builder labels its Job with that kind (read back by
    kind_of), under a name that fits a label value; the kinds the topic rounds start have a make, a fold and a
    last run; and a label this operator does not know is no kind (its Jobs are left alone)."""
    from storage_core.api.resources import TableSpec
    from storage_core.reconcile.tables import TableAction
    from tierkeeper_operator.job_kinds import (
        KINDS,
        TABLE_RUNS,
        JobKind,
        bucket_check_job,
        delete_job,
        kind_of,
        table_job,
    )

    assert set(KINDS) == set(JobKind)
    topic = TieredTopicSpec.model_validate({"clusterRef": {"name": "c"}, "topic": "orders"})
    table = TableSpec.model_validate({"location": "s3://b/tables/orders"})
    long_owner = Owner("TieredTopic", "o" * 63, "kafka", "u")
    built = {
        JobKind.COPY: copy_job(ACTION, CLUSTER, BROKER, OWNER, None, "r"),
        JobKind.CLEANUP: cleanup_job(
            CleanupAction("c", "kafka/orders", "orders", topic), CLUSTER, long_owner, "r"
        ),
        JobKind.DELETE: delete_job("orders", "id", "c", CLUSTER, long_owner, "r"),
        JobKind.REBUILD: rebuild_job(BROKER, CLUSTER, OWNER, None, "r"),
        JobKind.BUCKET_CHECK: bucket_check_job(CLUSTER, long_owner, "r"),
    }
    for action_kind, kind in TABLE_RUNS.items():
        action = TableAction(action_kind, "c", "kafka/orders", "orders", table)  # type: ignore[arg-type]
        built[kind] = table_job(action, CLUSTER, long_owner, "r")
    assert set(built) == set(JobKind)
    for kind, job in built.items():
        assert job["metadata"]["labels"][LABEL_KIND] == kind.value and kind_of(job) is kind
        assert job["metadata"]["name"].startswith(f"tk-{KINDS[kind].name_part}-")
        assert len(job["metadata"]["name"]) <= 63, job["metadata"]["name"]  # the pods' job-name label
        rules = KINDS[kind]
        planned = rules.followed_by == "topics"
        assert (rules.make is not None, rules.fold is not None, rules.last_run is not None) == (planned,) * 3
    assert {kind for kind, rules in KINDS.items() if rules.writes_tier} == {JobKind.COPY, JobKind.CLEANUP}
    newer = {"metadata": {"name": "tk-x", "labels": {LABEL_KIND: "compaction"}}}
    assert kind_of(newer) is None and kind_of({"metadata": {"name": "tk-y"}}) is None


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
    assert args[args.index("--copy-interval-ms") + 1] == "300000"  # the planner's timing (default 300 s)
    assert json.loads(job["metadata"]["annotations"][ANNOTATION_WORK]) == [["kafka/orders", "orders", []]]


@pytest.mark.parametrize("kind", ["export", "maintain"])
def test_table_job_manifest_gets_the_catalog_secret_only_as_environment(kind: str) -> None:
    from storage_core.reconcile.results import decode_table, encode_table
    from storage_core.reconcile.tables import TableAction
    from tierkeeper_operator.job_kinds import table_job

    spec = TieredTopicSpec.model_validate(
        {
            "clusterRef": {"name": "c"},
            "topic": "orders",
            "table": {
                "location": "s3://b/tables/orders",
                "catalog": {
                    "name": "lake",
                    "properties": {"type": "rest"},
                    "secretRef": {"name": "lake-cat"},
                },
                "valueDecoding": {
                    "format": "avro",
                    "schemaRegistryUrl": "https://registry:8081",
                    "secretRef": {"name": "registry-auth"},
                },
            },
        }
    )
    assert spec.table is not None
    action = TableAction(kind, "c", "kafka/orders", "orders", spec.table)  # type: ignore[arg-type]
    job = table_job(action, CLUSTER, Owner("TieredTopic", "orders", "kafka", "u"), "r")
    container = job["spec"]["template"]["spec"]["containers"][0]
    verb = {"export": "export", "maintain": "table-maintenance"}[kind]
    assert container["args"][0] == verb and job["metadata"]["labels"][LABEL_KIND] == verb
    assert {"secretRef": {"name": "lake-cat"}} in container["envFrom"]  # pyiceberg's PYICEBERG_CATALOG__...
    assert {"secretRef": {"name": "s3"}} in container["envFrom"]  # the table is on the tier's store
    assert "lake-cat" not in " ".join(container["args"])
    # The schema registry's credentials (SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO): the export's environment.
    assert ({"secretRef": {"name": "registry-auth"}} in container["envFrom"]) is (kind == "export")
    if kind == "export":
        args = container["args"]
        assert args[args.index("--value-format") + 1 :][:3] == [
            "avro",
            "--schema-registry",
            "https://registry:8081",
        ]
    else:
        assert "--value-format" not in container["args"]
    assert container["args"][container["args"].index("--table") + 1] == "tierkeeper.orders"
    assert json.loads(job["metadata"]["annotations"][ANNOTATION_WORK]) == [["kafka/orders", "orders", []]]
    # What the Job leaves as its termination message reads back, success or failure.
    report = {"snapshot_id": 7, "next_offsets": {str(p): 10**12 for p in range(500)}}
    decoded, failure = decode_table(kind, encode_table(kind, report))
    assert failure is None and decoded is not None and decoded["snapshot_id"] == 7
    assert "next_offsets" not in decoded and len(encode_table(kind, report)) <= 4096  # cut to fit
    assert decode_table(kind, encode_table(kind, None, "catalog lake: 403")) == (None, "catalog lake: 403")


def test_the_running_jobs_writing_a_topics_tier_are_found_by_their_work() -> None:
    spec = TieredTopicSpec.model_validate({"clusterRef": {"name": "c"}, "topic": "orders"})
    copy = copy_job(ACTION, CLUSTER, BROKER, OWNER, "node-a", "r1")
    cleanup = cleanup_job(
        CleanupAction("c", "kafka/orders", "orders", spec),
        CLUSTER,
        Owner("TieredTopic", "orders", "kafka", "u"),
        "r",
    )
    other = copy_job(
        CopyAction("c", 2, "kafka/broker-2", (TopicPartitions("kafka/other", "other", (0,)),)),
        CLUSTER,
        BROKER,
        OWNER,
        "node-a",
        "r2",
    )
    done = copy_job(ACTION, CLUSTER, BROKER, OWNER, "node-a", "r3")
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    jobs = [copy, cleanup, other, done]
    assert tier_writers(jobs, "kafka/orders") == sorted(
        [copy["metadata"]["name"], cleanup["metadata"]["name"]]
    )
    assert tier_writers(jobs, "kafka/other") == [other["metadata"]["name"]]
    assert tier_writers(jobs, "kafka/gone") == []


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


SECURE = KafkaClusterConfig.model_validate(
    {
        "name": "c",
        "bootstrapServers": "k:9093",
        "clientConfig": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"},
        "clientConfigSecretRef": {"name": "kafka-sasl"},
        "remote": {"url": "s3://b/p", "storageOptionsSecretRef": {"name": "s3"}},
        "jobs": {
            "cleanupEngine": "spark",
            "sparkMaster": "spark://spark-master:7077",
            "sparkConf": {"spark.executor.memory": "2g", "spark.executor.instances": "3"},
        },
    }
)


def _every_string(node: object) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (str(k), *_every_string(v))]
    if isinstance(node, list):
        return [s for item in node for s in _every_string(item)]
    return [str(node)]


def test_kafka_jobs_get_client_properties_and_secrets_only_by_reference() -> None:
    spec = TieredTopicSpec.model_validate({"clusterRef": {"name": "c"}, "topic": "orders"})
    jobs = [
        copy_job(ACTION, SECURE, BROKER, OWNER, None, "r"),
        cleanup_job(CleanupAction("c", "kafka/orders", "orders", spec), SECURE, OWNER, "r"),
        rebuild_job(BROKER, SECURE, OWNER, None, "r"),
    ]
    for job in jobs:
        pod = job["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        args = container["args"]
        # Non-secret properties are flags; the Secret is a read-only volume the command reads as files.
        assert args[args.index("--kafka-config-dir") + 1] == KAFKA_CONFIG_DIR
        properties = [args[i + 1] for i, a in enumerate(args) if a == "--kafka-property"]
        assert properties == ["sasl.mechanism=SCRAM-SHA-512", "security.protocol=SASL_SSL"]
        volume = next(v for v in pod["volumes"] if v["name"] == "kafka-client")
        assert volume == {"name": "kafka-client", "secret": {"secretName": "kafka-sasl"}}
        mount = next(m for m in container["volumeMounts"] if m["name"] == "kafka-client")
        assert mount == {"name": "kafka-client", "mountPath": KAFKA_CONFIG_DIR, "readOnly": True}
        # Storage credentials come from the Secret as environment (envFrom), never as values.
        assert container["envFrom"] == [{"secretRef": {"name": "s3"}}]
        assert "env" not in container
        assert not any(credential_like(a.partition("=")[0]) for a in properties)
        assert "--storage-option" not in args


def test_no_credential_reaches_a_job_manifest() -> None:
    """What the Secrets hold is never in the cluster configuration, so it cannot reach a manifest: the
    configuration refuses credential-like storage options and client properties inline."""
    spec = TieredTopicSpec.model_validate({"clusterRef": {"name": "c"}, "topic": "orders"})
    job = cleanup_job(CleanupAction("c", "kafka/orders", "orders", spec), SECURE, OWNER, "r")
    words = " ".join(_every_string(job)).lower()
    assert "password" not in words and "aws_secret" not in words
    raw = SECURE.model_dump(by_alias=True, mode="json")
    for where, key, value in (
        ("clientConfig", "sasl.password", "hunter2"),
        ("clientConfig", "ssl.key.password", "hunter2"),
        ("storageOptions", "secret", "hunter2"),
    ):
        bad = json.loads(json.dumps(raw))
        target = bad["remote"] if where == "storageOptions" else bad
        target[where] = {key: value}
        with pytest.raises(ValidationError) as refused:
            KafkaClusterConfig.model_validate(bad)
        assert f"{where} {key} look like credentials" in describe_errors(refused.value, "cluster")
        assert value not in describe_errors(refused.value, "cluster")  # the one-line error quotes no value


def test_cleanup_job_runs_on_spark_when_configured() -> None:
    spec = TieredTopicSpec.model_validate({"clusterRef": {"name": "c"}, "topic": "orders"})
    action = CleanupAction("c", "kafka/orders", "orders", spec)
    args = cleanup_job(action, SECURE, OWNER, "r")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--engine") + 1] == "spark"
    assert args[args.index("--spark-master") + 1] == "spark://spark-master:7077"
    confs = [args[i + 1] for i, a in enumerate(args) if a == "--spark-conf"]
    assert confs == ["spark.executor.instances=3", "spark.executor.memory=2g"]
    plain = cleanup_job(action, CLUSTER, OWNER, "r")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--engine" not in plain and "--spark-master" not in plain  # local engine: the default
    # The flags are the cleanup command's own: its parser accepts exactly these arguments.
    from storage_core.cli.main import build_parser

    parsed = build_parser().parse_args(args)
    assert parsed.engine == "spark" and parsed.spark_master == "spark://spark-master:7077"
    assert parsed.kafka_config_dir == KAFKA_CONFIG_DIR


def test_node_placement_of_jobs() -> None:
    placed = CLUSTER.model_copy(
        update={
            "jobs": CLUSTER.jobs.model_validate(
                {
                    **CLUSTER.jobs.model_dump(by_alias=True),
                    "nodeSelector": {"pool": "batch"},
                    "tolerations": [{"key": "dedicated", "value": "kafka", "effect": "NoSchedule"}],
                    "priorityClassName": "tiering",
                }
            )
        }
    )
    spec = TieredTopicSpec.model_validate({"clusterRef": {"name": "c"}, "topic": "orders"})
    cleanup = cleanup_job(
        CleanupAction("c", "kafka/orders", "orders", spec),
        placed,
        Owner("TieredTopic", "o", "kafka", "u"),
        "r",
    )["spec"]["template"]["spec"]
    copy = copy_job(ACTION, placed, BROKER, OWNER, "node-a", "r")["spec"]["template"]["spec"]
    toleration = {"key": "dedicated", "operator": "Equal", "value": "kafka", "effect": "NoSchedule"}
    assert cleanup["nodeSelector"] == {"pool": "batch"}
    # A copy Job runs where the broker's volume is: the user's labels never replace that pin.
    assert copy["nodeSelector"] == {"kubernetes.io/hostname": "node-a"}
    for pod in (cleanup, copy):
        assert pod["tolerations"] == [toleration] and pod["priorityClassName"] == "tiering"
    default = copy_job(ACTION, CLUSTER, BROKER, OWNER, None, "r")["spec"]["template"]["spec"]
    assert (
        "nodeSelector" not in default and "tolerations" not in default and "priorityClassName" not in default
    )


@pytest.mark.parametrize(
    ("toleration", "message"),
    [
        ({"key": "k", "operator": "Exists", "value": "v"}, "operator Exists takes no value"),
        ({"value": "v"}, "without a key must use operator Exists"),
        ({"key": "k", "effect": "NoWhere"}, "NoSchedule"),
    ],
)
def test_a_toleration_kubernetes_would_refuse_is_refused_at_start(
    toleration: dict[str, str], message: str
) -> None:
    raw = {**CLUSTER.model_dump(by_alias=True), "jobs": {"tolerations": [toleration]}}
    with pytest.raises(ValidationError, match=message):
        KafkaClusterConfig.model_validate(raw)


def test_job_pod_labels_annotations_scratch_space_and_no_api_token() -> None:
    """A service mesh needs the Job's pods annotated (a sidecar that never exits keeps a Job running); a
    Job needs no Kubernetes API, so its pod gets no token, except Spark on a k8s:// master."""
    raw = CLUSTER.model_dump(by_alias=True)
    raw["jobs"] |= {
        "podLabels": {"team": "kafka", LABEL_KIND: "mine"},
        "podAnnotations": {"sidecar.istio.io/inject": "false"},
        "tmpSizeLimit": "2Gi",
        "resources": {
            "requests": {"cpu": "1", "ephemeral-storage": "1Gi"},
            "limits": {"ephemeral-storage": "3Gi"},
        },
    }
    cluster = KafkaClusterConfig.model_validate(raw)
    spec = TieredTopicSpec.model_validate({"clusterRef": {"name": "c"}, "topic": "orders"})
    action = CleanupAction("c", "kafka/orders", "orders", spec)
    jobs = [
        copy_job(ACTION, cluster, BROKER, OWNER, "node-a", "r1"),
        cleanup_job(action, cluster, OWNER, "r1"),
        rebuild_job(BROKER, cluster, OWNER, "node-a", "r1"),
    ]
    for job in jobs:
        template = job["spec"]["template"]
        pod = template["spec"]
        (container,) = pod["containers"]
        assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
        assert template["metadata"]["labels"]["team"] == "kafka"
        assert template["metadata"]["labels"][LABEL_KIND] == job["metadata"]["labels"][LABEL_KIND] != "mine"
        assert {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}} in pod["volumes"]
        assert container["resources"] == {
            "requests": {"cpu": "1", "ephemeral-storage": "1Gi"},
            "limits": {"ephemeral-storage": "3Gi"},
        }
        assert pod["automountServiceAccountToken"] is False
    raw["jobs"] |= {"cleanupEngine": "spark", "sparkMaster": "k8s://https://kubernetes.default.svc"}
    spark = cleanup_job(action, KafkaClusterConfig.model_validate(raw), OWNER, "r1")
    assert spark["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    # The defaults: no limit on /tmp, nothing extra on the pod.
    plain = copy_job(ACTION, CLUSTER, BROKER, OWNER, "node-a", "r1")["spec"]["template"]
    assert {"name": "tmp", "emptyDir": {}} in plain["spec"]["volumes"] and plain["metadata"][
        "annotations"
    ] == {}


JBOD = TieredBrokerSpec.model_validate(
    {
        "clusterRef": {"name": "c"},
        "brokerId": 4,
        "logDir": {
            "claimName": "data-0-my-cluster-broker-4",
            "mountPath": "/var/lib/kafka/data-0",
            "path": "/var/lib/kafka/data-0/kafka-log4",
        },
        "extraLogDirs": [
            {
                "claimName": "data-1-my-cluster-broker-4",
                "mountPath": "/var/lib/kafka/data-1",
                "path": "/var/lib/kafka/data-1/kafka-log4",
            }
        ],
    }
)


def _log_dir_mounts(job: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    dirs = [args[i + 1] for i, a in enumerate(args) if a == "--log-dir"]
    claims = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    mounts = [m for m in container["volumeMounts"] if m["name"].startswith("log-dir")]
    return claims, mounts, dirs


def test_a_jbod_brokers_jobs_mount_every_claim_and_name_every_log_dir() -> None:
    from storage_core.cli.main import build_parser
    from storage_core.reconcile.requests import CopyRequest, RebuildRequest

    paths = ["/var/lib/kafka/data-0/kafka-log4", "/var/lib/kafka/data-1/kafka-log4"]
    action = CopyAction("c", 4, "kafka/b4", (TopicPartitions("kafka/orders", "orders", (0, 1)),))
    claims, mounts, dirs = _log_dir_mounts(copy_job(action, CLUSTER, JBOD, OWNER, None, "r"))
    assert dirs == paths
    assert claims == [
        {
            "name": "log-dir",
            "persistentVolumeClaim": {"claimName": "data-0-my-cluster-broker-4", "readOnly": True},
        },
        {
            "name": "log-dir-1",
            "persistentVolumeClaim": {"claimName": "data-1-my-cluster-broker-4", "readOnly": True},
        },
    ]
    assert mounts == [
        {"name": "log-dir", "mountPath": "/var/lib/kafka/data-0", "readOnly": True},
        {"name": "log-dir-1", "mountPath": "/var/lib/kafka/data-1", "readOnly": True},
    ]
    job = copy_job(action, CLUSTER, JBOD, OWNER, None, "r")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert CopyRequest.from_args(build_parser().parse_args(args)).log_dirs == tuple(paths)

    rebuild = rebuild_job(JBOD, CLUSTER, OWNER, None, "r")
    claims, mounts, dirs = _log_dir_mounts(rebuild)
    assert dirs == paths
    # The rebuild writes into every dir: nothing read-only.
    assert [c["persistentVolumeClaim"] for c in claims] == [
        {"claimName": "data-0-my-cluster-broker-4"},
        {"claimName": "data-1-my-cluster-broker-4"},
    ]
    assert [m["mountPath"] for m in mounts] == ["/var/lib/kafka/data-0", "/var/lib/kafka/data-1"]
    assert all("readOnly" not in m for m in mounts)
    args = rebuild["spec"]["template"]["spec"]["containers"][0]["args"]
    assert RebuildRequest.from_args(build_parser().parse_args(args)).log_dirs == tuple(paths)


def test_two_log_dirs_on_one_claim_are_one_volume_mounted_twice() -> None:
    shared = JBOD.model_copy(
        update={
            "log_dir": JBOD.log_dir.model_copy(update={"claim_name": "disk", "sub_path": "a"}),
            "extra_log_dirs": [
                JBOD.extra_log_dirs[0].model_copy(update={"claim_name": "disk", "sub_path": "b"})
            ],
        }
    )
    claims, mounts, _ = _log_dir_mounts(rebuild_job(shared, CLUSTER, OWNER, None, "r"))
    assert claims == [{"name": "log-dir", "persistentVolumeClaim": {"claimName": "disk"}}]
    assert [(m["name"], m["mountPath"], m["subPath"]) for m in mounts] == [
        ("log-dir", "/var/lib/kafka/data-0", "a"),
        ("log-dir", "/var/lib/kafka/data-1", "b"),
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"claimName": "x", "mountPath": "/var/lib/kafka", "path": "/var/lib/kafka/data-0/kafka-log4"},
            "logDir.path and every extraLogDirs[].path must differ",
        ),
        ({"path": "/elsewhere/kafka-log4"}, "extraLogDirs[].claimName must be set exactly when"),
        (
            {"claimName": "x", "mountPath": "/var/lib/kafka/data-0", "path": "/var/lib/kafka/data-0/other"},
            "every log dir's claim needs a mountPath of its own",
        ),
    ],
)
def test_extra_log_dirs_are_refused_when_they_clash(extra: dict[str, Any], message: str) -> None:
    body = JBOD.model_dump(mode="json", by_alias=True, exclude_none=True)
    body["extraLogDirs"] = [extra]
    with pytest.raises(ValidationError) as err:
        TieredBrokerSpec.model_validate(body)
    assert message in describe_errors(err.value)
