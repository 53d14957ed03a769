"""The trim hold through the operator on the real API server: a TieredTopic without a trimHold of its own
gets the TieredCluster configuration's default in its cleanup Job's arguments; the Job's result (its
termination message) says a bound was exceeded for one group and another group holds a partition; the
next round writes ``status.trimHold`` and the ``TrimHeld`` condition (Ready untouched), posts one Warning
Event naming the group, the partition and the offsets it misses, sets the trim-hold gauges, and
``kubectl get tieredtopics`` shows the held partitions; a later round repeats no Warning.

The Jobs replay results this test wrote (the image of ``k8s_helpers.replay_image``): what the cleanup
itself decides is tested with real consumer groups elsewhere (tests/retention, and the standalone test
of tests/reconcile); here the operator's side of it is, from the Job's arguments to the Event."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from k8s_helpers import job_finished, produce, replay_image, unique
from test_k8s_operator_real import log_dir_claims

from harness.control_plane import ControlPlane
from harness.k8s import load_crds
from harness.kafka import KafkaCluster
from harness.tools import run_tool
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.reconcile.results import encode_cleanup, encode_copy
from tierkeeper_operator import GROUP, VERSION
from tierkeeper_operator.compose import build_reconciler
from tierkeeper_operator.jobs import LABEL_KIND
from tierkeeper_operator.kube import Kube

HOLD_DEFAULT = {"maxAgeMs": 172_800_000, "ignoreGroups": ["connect-*"]}


def _results(results: Path, topic: str) -> None:
    """What the replayed copy and cleanup Jobs leave: partition 0 tiered, then trimmed past a stalled
    group (maxAge) while partition 1 stays held by a direct reader."""
    copy_row = {
        "topic": topic,
        "topic_id": None,
        "remote_start_offset": 0,
        "remote_end_offset": 29_999,
        "remote_segments": 3,
        "remote_bytes": 30_000,
        "untiered_segments": 0,
        "untiered_bytes": 0,
        "copied_segments": 3,
        "copied_bytes": 30_000,
    }
    (results / "copy").write_text(encode_copy([{**copy_row, "partition": p} for p in (0, 1)]))
    stalled = {"group": "stalled-etl", "offset": 5_000, "to": 28_937, "reason": "maxAge"}
    cleanup = {
        "partitions": [
            {
                "topic": topic,
                "topic_id": None,
                "partition": 0,
                "remote_start_offset": 0,
                "deleted": [],
                "bytes_deleted": 0,
                "local_trim": {"from": 0, "to": 28_937},
                "trim_hold": {"window_to": 28_937, "to": 28_937, "held_by": [], "overridden": [stalled]},
            },
            {
                "topic": topic,
                "topic_id": None,
                "partition": 1,
                "remote_start_offset": 0,
                "deleted": [],
                "bytes_deleted": 0,
                "local_trim": {"from": 0, "to": 12_000},
                "trim_hold": {
                    "window_to": 28_000,
                    "to": 12_000,
                    "held_by": [{"group": "billing-sink", "offset": 12_000}],
                    "overridden": [],
                },
            },
        ],
        "errors": [],
        "bytes_deleted": 0,
    }
    (results / "cleanup").write_text(encode_cleanup(cleanup))


def _warnings(plane: ControlPlane, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    events = plane.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    return [
        e
        for e in events
        if e["involvedObject"]["name"] == name and e["reason"] == reason and e["type"] == "Warning"
    ]


def test_the_operator_reports_what_holds_the_trim_and_warns_once_when_a_bound_is_exceeded(
    k8s_control_plane: ControlPlane, k8s_namespace: str, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    plane.apply_crds(load_crds())
    log_dir_claims(plane, ns, kafka_broker)
    topic = unique("held")
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "-1"})])[topic].result(60)
    kafka_broker.wait_topic(topic, 2)
    produce(kafka_broker, topic, 20)  # an empty topic has nothing to copy: no Job would start
    results = tmp_path / "results"
    results.mkdir()
    _results(results, topic)
    cluster = KafkaClusterConfig.model_validate(
        {
            "name": "local",
            "bootstrapServers": kafka_broker.bootstrap_servers,
            "remote": {"url": f"file://{tmp_path / 'remote'}"},
            "jobs": {"image": replay_image(plane, results)},
            "trimHold": HOLD_DEFAULT,
        }
    )
    (broker_id,) = kafka_broker.node_ids
    log_dir = str(kafka_broker.log_dir(broker_id))
    api = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}"
    plane.request(
        "POST",
        f"{api}/tieredbrokers",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TieredBroker",
            "metadata": {"name": f"broker-{broker_id}"},
            "spec": {
                "clusterRef": {"name": "local"},
                "brokerId": broker_id,
                "logDir": {"claimName": f"data-{broker_id}", "mountPath": log_dir, "path": log_dir},
            },
        },
    )
    plane.request(
        "POST",
        f"{api}/tieredtopics",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TieredTopic",
            "metadata": {"name": topic},
            "spec": {"clusterRef": {"name": "local"}, "topic": topic, "localRetentionMs": 600_000},
        },
    )
    operator = build_reconciler(Kube(plane.api_client(), (ns,)), {"local": cluster})
    metrics = operator.metrics
    operator.run_round()  # the copy Job
    job_finished(plane, ns, "copy")
    operator.run_round()  # its result folded; the cleanup Job
    jobs = plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs?labelSelector={LABEL_KIND}%3Dcleanup")
    (job,) = jobs["items"]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--trim-hold-max-age-ms") + 1] == "172800000"  # the cluster's default
    assert args[args.index("--trim-hold-ignore-group") + 1] == "connect-*"
    job_finished(plane, ns, "cleanup")
    assert not _warnings(plane, ns, topic, "TrimHoldExceeded")
    operator.run_round()  # the cleanup Job's result folded

    obj = plane.request("GET", f"{api}/tieredtopics/{topic}")
    status = obj["status"]
    hold = status["trimHold"]
    assert (hold["heldPartitions"], hold["overriddenPartitions"]) == (1, 1), hold
    over, held = hold["partitions"]
    assert over["overridden"] == [{"group": "stalled-etl", "offset": 5000, "to": 28937, "reason": "maxAge"}]
    assert held["heldBy"] == [{"group": "billing-sink", "offset": 12000}] and held["windowTo"] == 28000
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Ready"]["status"] == "True", by_type  # a held trim is no trouble of Tierkeeper's
    assert (by_type["TrimHeld"]["status"], by_type["TrimHeld"]["reason"]) == ("True", "TrimHoldExceeded")
    (warning,) = _warnings(plane, ns, topic, "TrimHoldExceeded")
    assert "group stalled-etl misses offsets [5000, 28937) of partition 0 (maxAge)" in warning["message"]
    where = {"cluster": "local", "topic": topic}
    missed = metrics.registry.get_sample_value(
        "tierkeeper_trim_hold_missed_offsets", {**where, "partition": "0", "group": "stalled-etl"}
    )
    assert missed == 28_937 - 5_000
    held_offsets = metrics.registry.get_sample_value(
        "tierkeeper_trim_held_offsets", {**where, "partition": "1", "group": "billing-sink"}
    )
    assert held_offsets == 28_000 - 12_000

    listing = run_tool("kubectl", ["--kubeconfig", str(plane.kubeconfig), "-n", ns, "get", "tieredtopics"])
    header, row = listing.stdout.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "TOPIC", "READY", "STATUS", "LAG"] and "HELD" in header.split()
    assert row[header.index("HELD") :].split()[0] == "1", listing.stdout

    operator.run_round()  # nothing new: no second Warning, the condition stays
    assert len(_warnings(plane, ns, topic, "TrimHoldExceeded")) == 1
    again = plane.request("GET", f"{api}/tieredtopics/{topic}")["status"]
    assert next(c for c in again["conditions"] if c["type"] == "TrimHeld") == by_type["TrimHeld"]
