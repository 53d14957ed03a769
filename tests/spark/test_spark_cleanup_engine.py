"""``tierkeeper cleanup --engine spark`` (one Spark task per topic-partition) deletes exactly what the
in-process cleanup deletes, on two identical copies of a real tiered topic, and holds the local trim for
the same consumer groups."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from storage.dataset import Dataset

from harness.kafka import KafkaCluster
from harness.tierkeeper_cli import run_cli

from .conftest import Tier, copy_to


def _cleanup(tier: Tier, topic: str, engine: str, *extra: str) -> dict[str, Any]:
    proc = run_cli(
        "cleanup",
        "--topic",
        topic,
        "--remote-retention-bytes",
        "300000",
        "--engine",
        engine,
        "--spark-master",
        "local[2]",
        "--json",
        *tier.cli_flags,
        *extra,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def _normalised(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-partition results without the segment ids (each copy gave its segments their own)."""
    out = []
    for part in sorted(report["partitions"], key=lambda p: p["partition"]):
        part = {k: v for k, v in part.items() if k != "topic_id"}
        part["deleted"] = [{k: v for k, v in d.items() if k != "segment_id"} for d in part["deleted"]]
        out.append(part)
    return out


def test_spark_cleanup_deletes_what_the_local_cleanup_deletes(
    spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = spark_dataset.codec_topics[0]
    tiers = []
    for name in ("local", "spark"):
        url = f"file://{tmp_path / name}"
        tier = Tier(url, {}, {"remote": url}, ["--remote", url], {})
        copy_to(tier, spark_dataset, kafka_broker, [topic])
        tiers.append(tier)
    local, spark = _cleanup(tiers[0], topic, "local"), _cleanup(tiers[1], topic, "spark")
    assert local["errors"] == spark["errors"] == []
    assert _normalised(spark) == _normalised(local)
    assert local["bytes_deleted"] == spark["bytes_deleted"] > 0
    # What stays readable is the same too.
    for p in range(2):
        assert tiers[0].remote_end(topic, p) == tiers[1].remote_end(topic, p)


def test_spark_cleanup_holds_the_trim_where_the_local_cleanup_does(
    spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = spark_dataset.codec_topics[1]
    url = f"file://{tmp_path / 'tier'}"
    tier = Tier(url, {}, {"remote": url}, ["--remote", url], {})
    copy_to(tier, spark_dataset, kafka_broker, [topic])
    group, held = f"direct-{topic}", tier.remote_end(topic, 1) // 2
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 1, held)], asynchronous=False)
    consumer.close()
    flags = (
        "--dry-run",
        "--bootstrap-servers",
        kafka_broker.bootstrap_servers,
        "--local-retention-bytes",
        "1",
        "--trim-hold-max-age-ms",  # the dataset's records are from 2023: past the default bound
        "-1",
    )
    local, spark = _cleanup(tier, topic, "local", *flags), _cleanup(tier, topic, "spark", *flags)
    assert local["errors"] == spark["errors"] == []
    assert _normalised(spark) == _normalised(local)
    holds = {p["partition"]: p["trim_hold"] for p in local["partitions"]}
    assert holds[1]["held_by"] == [{"group": group, "offset": held}] and holds[1]["to"] == held
    assert holds[0]["held_by"] == [] and holds[0]["to"] == tier.remote_end(topic, 0) + 1
