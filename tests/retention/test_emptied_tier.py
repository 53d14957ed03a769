"""A tier remote retention empties entirely, on a real broker: what it expired leaves the broker too, and
is never tiered again (the seed 7 finding of the fault campaign, docs/reliability.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.kafka import KafkaCluster
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore
from storage_core.remote.catalog import PartitionCatalog, list_partitions, list_topics
from storage_core.remote.layout import RemoteLayout, TopicPartitionId

from .conftest import TieredTopic, make_topic

KEEP_EVERYTHING_LOCALLY = str(1 << 40)


@pytest.fixture(scope="module")
def emptied_topic(kafka_broker: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> TieredTopic:
    return make_topic(kafka_broker, "emptied-tier", tmp_path_factory.mktemp("emptied"))


def _cleanup(topic: TieredTopic, remote: Path) -> dict[str, object]:
    proc = topic.cleanup(
        remote,
        "--remote-retention-ms",
        "1",  # every record is older: the whole tier expires
        "--local-retention-bytes",
        KEEP_EVERYTHING_LOCALLY,  # the window alone would trim nothing
    )
    assert proc.returncode == 0, proc.stderr
    part: dict[str, object] = json.loads(proc.stdout)["partitions"][0]
    return part


def test_what_remote_retention_expired_leaves_the_broker_and_is_not_tiered_again(
    emptied_topic: TieredTopic, tmp_path: Path
) -> None:
    remote = emptied_topic.fresh_remote(tmp_path / "remote")
    admin = KafkaAdmin(emptied_topic.bootstrap)
    key = (emptied_topic.topic, 0)
    segments = emptied_topic.segments(remote)
    expired_end = segments[-1].next_offset
    assert admin.log_start_offsets([key])[key] < expired_end

    part = _cleanup(emptied_topic, remote)
    assert len(part["deleted"]) == len(segments)  # type: ignore[arg-type]
    assert emptied_topic.segments(remote) == []
    assert part["local_trim"] == {
        "from": 0,
        "to": expired_end,
        "tiered_end": None,
        "expired_remotely": expired_end,
    }
    assert admin.log_start_offsets([key])[key] == expired_end

    # The next copy does not tier the expired offsets again (the broker may still hold their files
    # until Kafka deletes them below the log start).
    copied = run_cli(
        "copy",
        "--log-dir",
        str(emptied_topic.log_dir),
        "--topic",
        emptied_topic.topic,
        "--bootstrap-servers",
        emptied_topic.bootstrap,
        "--remote",
        f"file://{remote}",
        "--json",
    )
    assert copied.returncode == 0, copied.stderr
    assert json.loads(copied.stdout)["copied_segments"] == 0
    assert emptied_topic.segments(remote) == []
    store = RemoteStore(f"file://{remote}")
    (tp,) = _partitions(store, emptied_topic.topic)
    assert PartitionCatalog(store, RemoteLayout(store.root), tp).read_state().retention_expired_offset == (
        expired_end
    )

    # Nothing more to do, and nothing below the log start is trimmed twice.
    again = _cleanup(emptied_topic, remote)
    assert again["deleted"] == [] and again.get("local_trim") is None
    assert admin.log_start_offsets([key])[key] == expired_end


def _partitions(store: RemoteStore, topic: str) -> list[TopicPartitionId]:
    layout = RemoteLayout(store.root)
    incarnations = [tid for name, tid in list_topics(store, layout) if name == topic]
    return [tp for tid in incarnations for tp in list_partitions(store, layout, topic, tid)]
