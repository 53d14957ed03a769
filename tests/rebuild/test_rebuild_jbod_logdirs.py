"""The rebuild of a broker with several log dirs, on a real filesystem and a real file:// remote tier: each
partition lands in exactly one dir (the one :func:`dir_index` names, again on a rerun), and a broker
with one dir holding data is refused or, in init-container mode, skipped before any dir is touched.
(The broker's side: tests/rebuild/test_rebuild_jbod.py on a real cluster.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage_core.jobs.rebuild import RebuildOptions, dir_index, rebuild_log_dirs
from storage_core.rebuild.plan import RebuildRefused
from storage_core.rebuild.state import META

from .synthetic import BROKER, TOPIC, format_log_dir, write_tier

PARTITIONS = 6


def test_each_partition_is_restored_into_one_dir(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote", partitions=PARTITIONS)
    dirs = [tmp_path / "data-0", tmp_path / "data-1"]
    for d in dirs:
        format_log_dir(d)
    options = RebuildOptions(broker_id=BROKER, parallelism=2)
    outcome = rebuild_log_dirs(dirs, tier.store, tier.cluster, options)
    assert outcome.action == "rebuilt"
    assert outcome.log_dir == f"{dirs[0]}, {dirs[1]}"
    assert [(p.topic, p.partition) for p in outcome.partitions] == [(TOPIC, p) for p in range(PARTITIONS)]
    assert outcome.restore.downloaded_files > 0
    homes = {i: {p for p in range(PARTITIONS) if dir_index(TOPIC, p, 2) == i} for i in (0, 1)}
    assert homes[0] and homes[1], "the hash put every partition into one dir"
    for i, d in enumerate(dirs):
        present = {int(n.rsplit("-", 1)[1]) for n in os.listdir(d) if n.startswith(f"{TOPIC}-")}
        assert present == homes[i]
    again = rebuild_log_dirs(dirs, tier.store, tier.cluster, options)
    assert again.action == "already-rebuilt"
    assert len(again.partitions) == PARTITIONS


def test_a_dir_holding_data_stops_the_whole_broker(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote", partitions=PARTITIONS)
    empty, kept = tmp_path / "data-0", tmp_path / "data-1"
    format_log_dir(empty)
    format_log_dir(kept)
    (kept / f"{TOPIC}-1").mkdir()
    options = RebuildOptions(broker_id=BROKER, parallelism=2)
    with pytest.raises(RebuildRefused, match=f"log dir {kept} is not empty"):
        rebuild_log_dirs([empty, kept], tier.store, tier.cluster, options)
    assert os.listdir(empty) == [META], "nothing restored into the empty dir before the refusal"

    init = RebuildOptions(broker_id=BROKER, parallelism=2, if_empty=True)
    skipped = rebuild_log_dirs([empty, kept], tier.store, tier.cluster, init)
    assert skipped.action == "skipped"
    assert skipped.reason.startswith(f"log dir {kept} holds data ({TOPIC}-1/)")
    assert "rebuilt only when all are empty" in skipped.reason
    assert os.listdir(empty) == [META]


def test_a_dir_named_twice_is_refused(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote", partitions=1)
    format_log_dir(tmp_path / "data")
    with pytest.raises(RebuildRefused, match="named twice"):
        rebuild_log_dirs(
            [tmp_path / "data", tmp_path / "data"], tier.store, tier.cluster, RebuildOptions(broker_id=BROKER)
        )


def test_the_init_containers_settings_carry_every_log_dir() -> None:
    """The settings the operator renders for the init container: every log dir of a JBOD broker, and for a
    broker with one dir exactly what a release before JBOD wrote (its model rejects unknown fields)."""
    from storage_core.api.cluster import KafkaClusterConfig
    from storage_core.api.rebuild_settings import dump_settings, load_settings, render_settings
    from storage_core.api.resources import TieredBrokerSpec

    cluster = KafkaClusterConfig.model_validate(
        {"name": "c", "bootstrapServers": "k:9092", "remote": {"url": "s3://b"}}
    )
    one = {"clusterRef": {"name": "c"}, "brokerId": 1, "logDir": {"path": "/k/d0/kafka-log1"}}
    jbod = {**one, "brokerId": 2, "extraLogDirs": [{"path": "/k/d1/kafka-log2"}]}
    specs = [("one", TieredBrokerSpec.model_validate(one)), ("jbod", TieredBrokerSpec.model_validate(jbod))]
    text = dump_settings(render_settings(cluster, specs))
    settings = load_settings(text, "settings.json")
    assert settings.for_broker(2).log_dirs() == ["/k/d0/kafka-log1", "/k/d1/kafka-log2"]  # type: ignore[union-attr]
    assert settings.for_broker(1).log_dirs() == ["/k/d0/kafka-log1"]  # type: ignore[union-attr]
    assert text.count("extraLogDirs") == 1
