"""``tierkeeper scrub`` (a Spark job) finds the damage a test plants in tiered objects: a flipped byte
inside a ``.log`` (size unchanged) and a shortened index, and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

from storage.dataset import Dataset

from harness.kafka import KafkaCluster
from harness.tierkeeper_cli import run_cli

from .conftest import Tier, copy_to


def test_scrub_reports_exactly_the_planted_damage(
    spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    url = f"file://{tmp_path / 'tier'}"
    tier = Tier(url, {}, {"remote": url}, ["--remote", url], {})
    topic = spark_dataset.codec_topics[0]
    copy_to(tier, spark_dataset, kafka_broker, [topic])
    args = ["scrub", "--topic", topic, "--spark-master", "local[2]", "--json", *tier.cli_flags]

    clean = run_cli(*args, timeout=600)
    assert clean.returncode == 0, clean.stderr[-3000:]
    report = json.loads(clean.stdout)
    assert report["damaged_objects"] == 0 and len(report["partitions"]) == 2
    assert report["bytes_read"] > 0

    logs = sorted((tmp_path / "tier").rglob("*.log"))
    indexes = sorted((tmp_path / "tier").rglob("*.remoteOffsetIndex"))
    flipped, shortened = logs[len(logs) // 2], indexes[0]
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x40
    flipped.write_bytes(bytes(data))
    shortened.write_bytes(shortened.read_bytes()[:-3])

    damaged = run_cli(*args, timeout=600)
    assert damaged.returncode == 3, damaged.stderr[-3000:]
    found = {d["key"]: d["problem"] for p in json.loads(damaged.stdout)["partitions"] for d in p["damage"]}
    assert set(found) == {str(flipped), str(shortened)}
    assert found[str(flipped)]
    assert "recorded" in found[str(shortened)]
