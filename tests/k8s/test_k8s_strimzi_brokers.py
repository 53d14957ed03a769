"""A Strimzi cluster's brokers become TieredBrokers (pure, no API server): the bootstrap address of the
named listener, one TieredBroker per broker node with Strimzi's claim, mount and log dir, a user's own
TieredBroker winning, pools scaled up and down followed, and what cannot be tiered named in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.paths import strimzi_dir
from storage_core.api.cluster_parts import StrimziRef
from tierkeeper_operator.jobs import Owner
from tierkeeper_operator.strimzi_brokers import broker_changes, strimzi_view

REF = StrimziRef(kafka="my-cluster", listener="plain")
STRIMZI = strimzi_dir()
OWNER = Owner("TieredCluster", "tiered", "kafka", "uid-tc")


def kafka(listeners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "my-cluster", "namespace": "kafka"},
        "status": {
            "listeners": listeners
            if listeners is not None
            else [
                {"name": "plain", "bootstrapServers": "my-cluster-kafka-bootstrap.kafka.svc:9092"},
                {"name": "tls", "bootstrapServers": "my-cluster-kafka-bootstrap.kafka.svc:9093"},
            ]
        },
    }


def pool(name: str, ids: list[int] | None, roles: list[str], storage: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"strimzi.io/cluster": "my-cluster"}},
        "spec": {"replicas": len(ids or []), "roles": roles, "storage": storage},
        "status": {} if ids is None else {"nodeIds": ids},
    }


PERSISTENT = {"type": "persistent-claim", "size": "100Gi"}
JBOD_ONE = {"type": "jbod", "volumes": [{"id": 0, "type": "persistent-claim", "size": "100Gi"}]}
JBOD_TWO = {
    "type": "jbod",
    "volumes": [{"id": 0, "type": "persistent-claim", "size": "1Gi"}, {"id": 1, "type": "persistent-claim"}],
}


def test_bootstrap_address_comes_from_the_named_listener() -> None:
    view = strimzi_view(REF, "tiered", kafka(), [], [])
    assert view.bootstrap_servers == "my-cluster-kafka-bootstrap.kafka.svc:9092"
    tls = strimzi_view(StrimziRef(kafka="my-cluster", listener="tls"), "tiered", kafka(), [], [])
    assert tls.bootstrap_servers == "my-cluster-kafka-bootstrap.kafka.svc:9093"
    missing = strimzi_view(StrimziRef(kafka="my-cluster", listener="external"), "tiered", kafka(), [], [])
    assert missing.bootstrap_servers is None
    assert missing.problems == [
        "Kafka my-cluster: no listener 'external' in status.listeners (listeners: plain, tls)"
    ]
    gone = strimzi_view(REF, "tiered", None, [], [])
    assert gone.problems == ["Strimzi Kafka 'my-cluster' not found in the namespace"]


def test_one_tiered_broker_per_broker_node_with_strimzis_paths() -> None:
    pools = [
        pool("controller", [0, 1, 2], ["controller"], JBOD_ONE),
        pool("broker", [3, 4, 5], ["broker"], JBOD_ONE),
        pool("mixed", [10], ["broker", "controller"], PERSISTENT),
    ]
    view = strimzi_view(REF, "tiered", kafka(), pools, [])
    assert sorted(view.brokers) == [3, 4, 5, 10]
    four = view.brokers[4]
    assert four.broker_id == 4 and four.cluster_ref.name == "tiered"
    assert four.log_dir.claim_name == "data-0-my-cluster-broker-4"
    assert four.log_dir.mount_path == "/var/lib/kafka/data-0"
    assert four.log_dir.path == "/var/lib/kafka/data-0/kafka-log4"
    assert four.placement.pod_name == "my-cluster-broker-4"
    ten = view.brokers[10]
    assert (ten.log_dir.claim_name, ten.log_dir.mount_path, ten.log_dir.path) == (
        "data-my-cluster-mixed-10",
        "/var/lib/kafka/data",
        "/var/lib/kafka/data/kafka-log10",
    )
    assert view.problems == []


def test_the_pods_own_claim_and_mount_win_over_the_naming_rule() -> None:
    pod = {
        "metadata": {"name": "my-cluster-broker-3"},
        "spec": {
            "containers": [
                {"name": "kafka", "volumeMounts": [{"name": "data-0", "mountPath": "/data/zero"}]}
            ],
            "volumes": [{"name": "data-0", "persistentVolumeClaim": {"claimName": "restored-claim"}}],
        },
    }
    view = strimzi_view(REF, "tiered", kafka(), [pool("broker", [3], ["broker"], JBOD_ONE)], [pod])
    log_dir = view.brokers[3].log_dir
    assert (log_dir.claim_name, log_dir.mount_path, log_dir.path) == (
        "restored-claim",
        "/data/zero",
        "/data/zero/kafka-log3",
    )


def test_what_cannot_be_tiered_is_named() -> None:
    mixed = {
        "type": "jbod",
        "volumes": [{"id": 0, "type": "persistent-claim"}, {"id": 1, "type": "ephemeral"}],
    }
    pools = [
        pool("mixed", [1], ["broker"], mixed),
        pool("eph", [2], ["broker"], {"type": "ephemeral"}),
        pool("new", None, ["broker"], PERSISTENT),
    ]
    view = strimzi_view(REF, "tiered", kafka(), pools, [])
    assert view.brokers == {}
    assert view.problems == [
        "broker 2 (pool eph): storage type 'ephemeral' has no claim a copy Job could mount",
        "broker 1 (pool mixed): JBOD volume(s) 1 are not persistent-claim: the partitions Kafka keeps there "
        "have no claim a copy Job could mount",
        "KafkaNodePool new: no status.nodeIds yet (Strimzi has not reconciled it)",
    ]


def strimzi_example(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Strimzi's own example (the Kafka and its node pools) as Strimzi's operator leaves them reconciled:
    node ids 0-2 for the controllers, 3-5 for the brokers."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    pools = [d for d in docs if d["kind"] == "KafkaNodePool"]
    first = 0
    for p in pools:
        p["status"] = {"nodeIds": list(range(first, first + p["spec"]["replicas"]))}
        first += p["spec"]["replicas"]
    (found,) = [d for d in docs if d["kind"] == "Kafka"]
    return {**found, "status": kafka()["status"]}, pools


def test_a_jbod_broker_gets_a_log_dir_per_volume() -> None:
    """Strimzi's JBOD example: each broker's two volumes are two log dirs, on the claims and at the mount
    paths Strimzi gives them; the controllers (no broker role) get none."""
    found, pools = strimzi_example(STRIMZI / "example-kafka-jbod.yaml")
    view = strimzi_view(REF, "tiered", found, pools, [])
    assert view.problems == []
    assert sorted(view.brokers) == [3, 4, 5]
    four = view.brokers[4]
    dirs = [(d.claim_name, d.mount_path, d.path) for d in four.log_dirs()]
    assert dirs == [
        ("data-0-my-cluster-broker-4", "/var/lib/kafka/data-0", "/var/lib/kafka/data-0/kafka-log4"),
        ("data-1-my-cluster-broker-4", "/var/lib/kafka/data-1", "/var/lib/kafka/data-1/kafka-log4"),
    ]
    changes = broker_changes(view, [], OWNER, "kafka")
    manifest = next(m for m in changes.create if m["spec"]["brokerId"] == 4)
    assert manifest["spec"]["extraLogDirs"] == [
        {
            "claimName": "data-1-my-cluster-broker-4",
            "mountPath": "/var/lib/kafka/data-1",
            "path": "/var/lib/kafka/data-1/kafka-log4",
        }
    ]
    # A volume added to the pool later is a third log dir of the kept TieredBroker.
    jbod = next(p for p in pools if p["metadata"]["name"] == "broker")
    jbod["spec"]["storage"]["volumes"].append({"id": 2, "type": "persistent-claim", "size": "1Gi"})
    grown = broker_changes(
        strimzi_view(REF, "tiered", found, pools, []), existing(changes.create), OWNER, "kafka"
    )
    assert grown.create == [] and grown.delete == []
    assert [len(m["spec"]["extraLogDirs"]) for m in grown.update] == [2, 2, 2]


def test_pools_of_another_cluster_are_ignored() -> None:
    other = pool("broker", [0], ["broker"], PERSISTENT)
    other["metadata"]["labels"]["strimzi.io/cluster"] = "other"
    assert strimzi_view(REF, "tiered", kafka(), [other], []).brokers == {}


def existing(changes_create: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifests as the API server would return them once created (with the CRD's defaults)."""
    out = []
    for manifest in changes_create:
        obj = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": "1"}}
        obj["spec"] = {**manifest["spec"], "paused": False, "rebuild": {"policy": "Never", "parallelism": 4}}
        out.append(obj)
    return out


def test_created_then_stable_then_scaled_up_and_down() -> None:
    three = strimzi_view(REF, "tiered", kafka(), [pool("broker", [0, 1, 2], ["broker"], JBOD_ONE)], [])
    first = broker_changes(three, [], OWNER, "kafka")
    assert [m["metadata"]["name"] for m in first.create] == [f"my-cluster-broker-{n}" for n in range(3)]
    assert first.update == first.delete == []
    manifest = first.create[0]
    assert manifest["apiVersion"] == "tierkeeper.io/v1alpha1" and manifest["kind"] == "TieredBroker"
    assert manifest["metadata"]["namespace"] == "kafka"
    (ref,) = manifest["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "TieredCluster",
        "tiered",
        "uid-tc",
        True,
    )
    assert manifest["spec"] == {
        "clusterRef": {"name": "tiered"},
        "brokerId": 0,
        "logDir": {
            "path": "/var/lib/kafka/data-0/kafka-log0",
            "claimName": "data-0-my-cluster-broker-0",
            "mountPath": "/var/lib/kafka/data-0",
        },
        "placement": {"podName": "my-cluster-broker-0"},
    }
    objs = existing(first.create)
    again = broker_changes(three, objs, OWNER, "kafka")
    assert again.create == again.update == again.delete == []

    four = strimzi_view(REF, "tiered", kafka(), [pool("broker", [0, 1, 2, 3], ["broker"], JBOD_ONE)], [])
    grown = broker_changes(four, objs, OWNER, "kafka")
    assert [m["metadata"]["name"] for m in grown.create] == ["my-cluster-broker-3"]
    assert grown.update == grown.delete == []

    two = strimzi_view(REF, "tiered", kafka(), [pool("broker", [0, 1], ["broker"], JBOD_ONE)], [])
    shrunk = broker_changes(two, objs, OWNER, "kafka")
    assert shrunk.delete == ["my-cluster-broker-2"] and shrunk.create == shrunk.update == []


def test_a_changed_storage_updates_the_kept_broker() -> None:
    three = strimzi_view(REF, "tiered", kafka(), [pool("broker", [0], ["broker"], JBOD_ONE)], [])
    objs = existing(broker_changes(three, [], OWNER, "kafka").create)
    moved = strimzi_view(REF, "tiered", kafka(), [pool("broker", [0], ["broker"], PERSISTENT)], [])
    changes = broker_changes(moved, objs, OWNER, "kafka")
    assert [m["spec"]["logDir"]["path"] for m in changes.update] == ["/var/lib/kafka/data/kafka-log0"]


def test_the_users_tiered_broker_wins_and_is_never_touched() -> None:
    view = strimzi_view(REF, "tiered", kafka(), [pool("broker", [0, 1], ["broker"], PERSISTENT)], [])
    ours = existing(broker_changes(view, [], OWNER, "kafka").create)
    users = {
        "metadata": {"name": "hand-written-1", "namespace": "kafka"},
        "spec": {
            "clusterRef": {"name": "tiered"},
            "brokerId": 1,
            "logDir": {"path": "/x/y", "mountPath": "/x"},
        },
    }
    changes = broker_changes(view, [*ours, users], OWNER, "kafka")
    assert changes.users == [1]
    assert changes.delete == ["my-cluster-broker-1"]  # the one kept before the user wrote theirs
    assert changes.create == changes.update == []
    # Scaled to nothing: only the operator's own are deleted, never the user's.
    empty = strimzi_view(REF, "tiered", kafka(), [pool("broker", [], ["broker"], PERSISTENT)], [])
    gone = broker_changes(empty, [*ours, users], OWNER, "kafka")
    assert gone.delete == ["my-cluster-broker-0", "my-cluster-broker-1"]


def test_a_name_taken_by_someone_else_is_left_alone() -> None:
    view = strimzi_view(REF, "tiered", kafka(), [pool("broker", [0], ["broker"], PERSISTENT)], [])
    stranger = {
        "metadata": {"name": "my-cluster-broker-0", "namespace": "kafka"},
        "spec": {"clusterRef": {"name": "elsewhere"}, "brokerId": 0, "logDir": {"path": "/a"}},
    }
    changes = broker_changes(view, [stranger], OWNER, "kafka")
    assert changes.create == changes.update == changes.delete == []
    assert changes.problems == [
        "broker 0: TieredBroker my-cluster-broker-0 exists and is not this TieredCluster's; it is left alone"
    ]
