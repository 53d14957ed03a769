"""``tierkeeper standalone`` rebuilds a TieredBroker's local log dir (policy WhenLogDirEmpty) before it
proceeds, with a real 3-broker Kafka: a dir holding data is left alone (status.rebuild Skipped), a
replaced one is restored from the tier the earlier rounds filled, and the broker rejoins the ISR."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from reconcile.test_standalone_real_kafka import write_setup

from harness.kafka import KafkaCluster
from storage_core.jobs.resource_files import load_clusters, load_manifests
from storage_core.jobs.standalone import Standalone

from .real import REBUILT, create_topic, produce, stop_and_wipe, wait_in_sync

pytestmark = pytest.mark.kafka

TOPIC = "clicks"


def test_standalone_rebuilds_an_empty_log_dir_first(tmp_path: Path, kafka_cluster_factory: type) -> None:
    kafka: KafkaCluster = kafka_cluster_factory(3)
    create_topic(kafka, TOPIC, 2, {"retention.ms": "-1"})  # Kafka keeps what is not yet tiered
    produce(kafka, TOPIC, 2, 700_000, seed=21)
    cluster_file, manifests = write_setup(tmp_path, kafka, {TOPIC: {}})
    for path in manifests.glob("*.yaml"):
        docs = list(yaml.safe_load_all(path.read_text()))
        for doc in docs:
            if doc and doc["kind"] == "TieredBroker":
                doc["spec"]["rebuild"] = {"policy": "WhenLogDirEmpty", "parallelism": 2}
        path.write_text(yaml.safe_dump_all(docs))
    runner = Standalone(load_clusters([cluster_file]), load_manifests(manifests))
    key = next(o.key for o in runner.brokers if o.name == f"broker-{REBUILT}")

    runner.run_round()
    first = runner.broker_status[key].rebuild
    assert first is not None and first.phase == "Skipped" and "holds data" in first.message, first
    topic = runner.topic_status[next(iter(runner.topic_status))]
    assert topic.last_copy is not None and topic.last_copy.result == "Succeeded", topic.message

    produce(kafka, TOPIC, 2, 100_000, seed=22)  # an untiered tail
    stop_and_wipe(kafka)
    runner.run_round()
    status = runner.broker_status[key]
    assert status.rebuild is not None and status.rebuild.phase == "Succeeded", status.rebuild
    assert status.rebuild.source == "Standalone" and status.rebuild.action == "rebuilt"
    assert status.rebuild.partitions_restored == 2 and status.rebuild.bytes_restored > 0
    assert {c.type: c.status for c in status.conditions}["Ready"] == "True"
    kafka.start_broker(REBUILT)
    wait_in_sync(kafka, [TOPIC])
    runner.run_round()  # the broker's dir holds data again: the record of the rebuild stays
    assert runner.broker_status[key].rebuild == status.rebuild
