"""``recover`` and ``rebuild``, the reading commands that need Kafka, answer a damaged remote tier with one
line naming the damage, never a traceback (the damage: storage/damaged_tier.py; the commands that need no
Kafka: storage/test_damaged_tier_errors.py). On the session's broker."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster
from storage_core.cli.main import main

from .damaged_tier import DAMAGE, make_tier

REBUILD_TOPIC = "damaged-tier-rebuild"
# Damage every restore must stop at: the segment it re-produces or installs, and the marker it would
# otherwise leave out (a reader never sees a tier beginning later than it does).
# (An index neither restores from is not read: rebuild installs segments, Kafka rebuilds its own indexes.)
MUST_FAIL = {"segment": ".log", "marker-without-manifest": ".COPY_FINISHED.json"}


def _one_line_or_success(code: int, err: str, verb: str, damage: str) -> None:
    lines = err.strip().splitlines()
    assert all(line.startswith(f"tierkeeper {verb}: ") for line in lines), err
    assert code == 0 or len(lines) == 1, err
    if damage in MUST_FAIL:
        assert code == 1 and MUST_FAIL[damage] in err, err


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_recover_from_a_damaged_tier_says_one_line(
    kafka_broker: KafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    topic = f"damaged-tier-recover-{damage}"  # deleted from Kafka, or never there: recover creates it
    tier = make_tier(tmp_path, topic)
    DAMAGE[damage](tier)
    capsys.readouterr()
    argv = ["recover", "--topic", topic, "--bootstrap-servers", kafka_broker.bootstrap_servers]
    argv += ["--replication-factor", "1", "--partitions", "1", "--config", "retention.ms=-1"]
    code = main([*argv, "--remote", f"file://{tier}"])
    _one_line_or_success(code, capsys.readouterr().err, "recover", damage)


@pytest.fixture(scope="module")
def broker_tier(kafka_broker: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tier copied from the broker's own log dir, so its topic id is the one Kafka assigns broker 1."""
    servers = kafka_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": servers})
    config = {"internal.segment.bytes": "16384", "retention.ms": "-1"}
    admin.create_topics([NewTopic(REBUILD_TOPIC, 1, 1, config=config)])[REBUILD_TOPIC].result(60)
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "batch.size": 4096})
    for i in range(400):
        producer.produce(REBUILD_TOPIC, value=f"{i:06d}".encode() * 20, partition=0)
    assert producer.flush(60) == 0
    tier = tmp_path_factory.mktemp("damaged-rebuild") / "tier"
    log_dir = str(kafka_broker.log_dir(1))
    argv = ["copy", "--log-dir", log_dir, "--topic", REBUILD_TOPIC, "--bootstrap-servers", servers]
    assert main([*argv, "--remote", f"file://{tier}"]) == 0
    return tier


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_rebuild_from_a_damaged_tier_says_one_line(
    kafka_broker: KafkaCluster,
    broker_tier: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    damage: str,
) -> None:
    tier = Path(shutil.copytree(broker_tier, tmp_path / "tier"))
    DAMAGE[damage](tier)
    others = [
        t
        for t in AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
        .list_topics(timeout=30)
        .topics
        if t != REBUILD_TOPIC
    ]
    new = tmp_path / "new-log-dir"  # the replaced broker's volume, formatted and empty
    new.mkdir()
    shutil.copy(kafka_broker.log_dir(1) / "meta.properties", new / "meta.properties")
    capsys.readouterr()
    argv = ["rebuild", "--log-dir", str(new), "--broker-id", "1"]
    argv += ["--bootstrap-servers", kafka_broker.bootstrap_servers, "--remote", f"file://{tier}", "--json"]
    for topic in others:  # other tests' topics on the session broker are not this test's business
        argv += ["--exclude-topic", topic]
    code = main(argv)
    _one_line_or_success(code, capsys.readouterr().err, "rebuild", damage)
