"""``tierkeeper standalone`` proposes each TieredBroker's num.replica.fetchers on a real 5-broker Kafka
4.1 cluster and applies the proposals with ``--approve-fetchers``, then with ``autoApprove`` in the
spec: every broker moves through its planned steps (its log shows each resize), and the fetcher threads
it then runs carry exactly the partitions the plan predicted (read from the brokers' logs). Topology:
fetchers.fetcher_topology. The tests run in file order on one cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fetchers import cli_run
from fetchers.fetcher_topology import (
    BOUNDS,
    BROKER_CONFIG,
    START_COUNT,
    TOPICS,
    create_topics,
    logged_resizes,
    wait_logs_match_model,
)

from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_fetchers import FetcherAdmin

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    kafka = KafkaCluster(
        tmp_path_factory.mktemp("fetchers-standalone"), brokers=5, broker_config=BROKER_CONFIG
    )
    kafka.start()
    try:
        create_topics(kafka, TOPICS)
        yield kafka
    finally:
        kafka.stop()


def standalone(cluster_file: Path, manifests: Path, *flags: str) -> dict[str, Any]:
    args = ["standalone", "--cluster", str(cluster_file), "--manifests", str(manifests), "--once", "--json"]
    proc = cli_run.tierkeeper(*args, *flags, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    data: dict[str, Any] = json.loads(proc.stdout)
    return data["tieredBrokers"]


def write_resources(
    kafka: KafkaCluster, where: Path, fetchers: dict[str, Any] | None = None
) -> tuple[Path, Path]:
    cluster_file = where / "cluster.yaml"
    cluster_file.write_text(
        yaml.safe_dump(
            {
                "name": "five",
                "bootstrapServers": kafka.bootstrap_servers,
                "remote": {"url": f"file://{where}/tier"},
            }
        )
    )
    manifests = where / "manifests"
    manifests.mkdir()
    docs = [
        {
            "apiVersion": "tierkeeper.io/v1alpha1",
            "kind": "TieredBroker",
            "metadata": {"name": f"broker-{b}", "namespace": "kafka"},
            "spec": {
                "clusterRef": {"name": "five"},
                "brokerId": b,
                "logDir": {"path": str(kafka.log_dir(b))},
                "replicaFetchers": fetchers or {"mode": "auto", **BOUNDS},
            },
        }
        for b in kafka.node_ids
    ]
    (manifests / "brokers.yaml").write_text(yaml.safe_dump_all(docs))
    return cluster_file, manifests


def test_standalone_shows_proposals_then_applies_them_step_by_step(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    cluster_file, manifests = write_resources(cluster, tmp_path)
    wait_logs_match_model(cluster, dict.fromkeys(cluster.node_ids, START_COUNT), TOPICS)

    shown = standalone(cluster_file, manifests)
    proposals = {int(key.split("-")[-1]): status["fetchers"] for key, status in shown.items()}
    for broker, fetchers in proposals.items():
        # The topology's point: at the running count every broker has idle slots beside a busy thread.
        assert fetchers["current"] == START_COUNT and fetchers["before"]["idleThreads"] > 0, fetchers
        assert fetchers["phase"] == "ProposalReady", fetchers
        assert fetchers["after"]["busiestThreadLoad"] < fetchers["before"]["busiestThreadLoad"], fetchers
        conditions = {c["type"]: c["status"] for c in shown[f"kafka/broker-{broker}"]["conditions"]}
        assert conditions == {"Ready": "True", "FetcherChangePending": "True"}
    assert any(len(f["steps"]) >= 2 for f in proposals.values()), proposals
    # Shown only: no broker changed its count.
    assert {s.value for s in FetcherAdmin(cluster.bootstrap_servers).settings().values()} == {START_COUNT}

    applied = standalone(cluster_file, manifests, "--approve-fetchers")
    counts = {}
    for broker, proposal in proposals.items():
        fetchers = applied[f"kafka/broker-{broker}"]["fetchers"]
        assert fetchers["phase"] == "Balanced", fetchers
        assert fetchers["applied"] == proposal["steps"] and fetchers["current"] == proposal["proposed"]
        values = [START_COUNT, *proposal["steps"]]
        assert logged_resizes(cluster, broker) == list(zip(values, values[1:], strict=False))
        counts[broker] = proposal["proposed"]
    settings = FetcherAdmin(cluster.bootstrap_servers).settings()
    assert {b: s.value for b, s in settings.items()} == counts
    assert {s.source for s in settings.values()} == {"DYNAMIC_BROKER_CONFIG"}
    wait_logs_match_model(cluster, counts, TOPICS)


def test_auto_approve_in_the_spec_brings_the_counts_down_within_new_bounds(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    before = FetcherAdmin(cluster.bootstrap_servers).settings()
    assert all(s.value > 4 for s in before.values()), before  # where the first test left them
    cluster_file, manifests = write_resources(
        cluster, tmp_path, {"mode": "auto", "max": 4, "autoApprove": True}
    )
    resized_before = {b: len(logged_resizes(cluster, b)) for b in cluster.node_ids}

    applied = standalone(cluster_file, manifests)  # no flag: the spec approves
    counts = {}
    for broker in cluster.node_ids:
        fetchers = applied[f"kafka/broker-{broker}"]["fetchers"]
        assert fetchers["phase"] == "Balanced" and fetchers["current"] <= 4, fetchers
        values = [before[broker].value, *fetchers["applied"]]
        assert fetchers["applied"] == fetchers["steps"] and len(values) >= 2
        assert logged_resizes(cluster, broker)[resized_before[broker] :] == list(
            zip(values, values[1:], strict=False)
        )
        counts[broker] = fetchers["current"]
    assert {b: s.value for b, s in FetcherAdmin(cluster.bootstrap_servers).settings().items()} == counts
    wait_logs_match_model(cluster, counts, TOPICS)
