"""Checkpoint files, partition.metadata and topic ids: round trips, Kafka's lenient empty files, and
malformed content reported as corruption."""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage_core.errors import CorruptDataError
from storage_core.formats.checkpoints import (
    EpochEntry,
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
    format_partition_metadata,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
    parse_partition_metadata,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
    topic_id_from_string,
    topic_id_to_string,
    write_atomically,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
    write_partition_metadata,
)
from storage_core.formats.segment_files import TopicPartition

TOPICS = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=30).filter(lambda t: t not in (".", ".."))
OFFSETS = st.integers(min_value=-1, max_value=2**63 - 1)


@given(st.dictionaries(st.builds(TopicPartition, TOPICS, st.integers(0, 10_000)), OFFSETS, max_size=30))
def test_offset_checkpoints_round_trip(entries: dict[TopicPartition, int]) -> None:
    text = format_offset_checkpoint(entries)
    lines = text.splitlines()
    assert lines[:2] == ["0", str(len(entries))]
    assert parse_offset_checkpoint(text) == entries


@given(st.lists(st.builds(EpochEntry, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)), max_size=30))
def test_leader_epoch_checkpoints_round_trip(entries: list[EpochEntry]) -> None:
    assert parse_leader_epoch_checkpoint(format_leader_epoch_checkpoint(entries)) == entries


def test_a_checkpoint_as_kafka_writes_it() -> None:
    text = "0\n3\n__consumer_offsets 7 12\norders 0 1500\nmy.topic-x 11 0\n"
    assert parse_offset_checkpoint(text) == {
        TopicPartition("__consumer_offsets", 7): 12,
        TopicPartition("orders", 0): 1500,
        TopicPartition("my.topic-x", 11): 0,
    }
    assert parse_leader_epoch_checkpoint("0\n2\n0 0\n4 1200\n") == [EpochEntry(0, 0), EpochEntry(4, 1200)]


@pytest.mark.parametrize("text", ["", "0\n", "0\n0\n"])
def test_empty_checkpoints_have_no_entries(text: str) -> None:
    assert parse_offset_checkpoint(text) == {}
    assert parse_leader_epoch_checkpoint(text) == []


@pytest.mark.parametrize(
    "text",
    ["1\n0\n", "0\n2\norders 0 1\n", "0\n1\norders 0\n", "0\n1\norders zero 1\n", "0\nx\n", "0\n1\n\n"],
)
def test_malformed_checkpoints_are_corruption(text: str) -> None:
    with pytest.raises(CorruptDataError):
        parse_offset_checkpoint(text, path="/logs/replication-offset-checkpoint")


def test_topic_names_with_spaces_cannot_be_written() -> None:
    with pytest.raises(ValueError):
        format_offset_checkpoint({TopicPartition("has space", 0): 1})


@given(st.uuids())
def test_topic_ids_round_trip_in_kafkas_alphabet(topic_id: uuid.UUID) -> None:
    text = topic_id_to_string(topic_id)
    assert len(text) == 22 and "=" not in text
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    # Independent decoding: standard base64 after swapping the URL-safe characters back.
    standard = text.replace("-", "+").replace("_", "/") + "=="
    assert base64.b64decode(standard) == topic_id.bytes
    assert topic_id_from_string(text) == topic_id


@pytest.mark.parametrize("text", ["", "short", "A" * 23, "AAAAAAAAAAAAAAAAAAAAA+", "AAAAAAAAAAAAAAAAAAAAAB"])
def test_bad_topic_ids_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        topic_id_from_string(text)


def test_partition_metadata_is_exactly_kafkas_text() -> None:
    topic_id = uuid.UUID("8f1c6a0e-3b52-4d9e-a1f7-2c4b9e0d6a13")
    text = format_partition_metadata(topic_id)
    assert text == f"version: 0\ntopic_id: {topic_id_to_string(topic_id)}"
    assert not text.endswith("\n")
    assert parse_partition_metadata(text) == topic_id
    assert parse_partition_metadata(text + "\n") == topic_id


@pytest.mark.parametrize(
    "text",
    [
        "",
        "version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ",
        "version: 0\n",
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",  # the zero uuid
        "version: 0\ntopic: x",
        "ver: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ",
    ],
)
def test_bad_partition_metadata_is_corruption(text: str) -> None:
    with pytest.raises(CorruptDataError):
        parse_partition_metadata(text)


def test_writers_replace_files_atomically(tmp_path: Path) -> None:
    checkpoint = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint.write_text("stale")
    entries = {TopicPartition("a", 0): 5, TopicPartition("b", 2): 9}
    write_offset_checkpoint(checkpoint, entries)
    assert read_offset_checkpoint(checkpoint) == entries
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()

    epochs = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(epochs, [EpochEntry(0, 0), EpochEntry(3, 77)])
    assert read_leader_epoch_checkpoint(epochs) == [EpochEntry(0, 0), EpochEntry(3, 77)]

    metadata = tmp_path / "partition.metadata"
    topic_id = uuid.uuid4()
    write_partition_metadata(metadata, topic_id)
    assert read_partition_metadata(metadata) == topic_id
    assert metadata.read_bytes() == format_partition_metadata(topic_id).encode()


def test_a_leftover_tmp_file_does_not_block_a_write(tmp_path: Path) -> None:
    target = tmp_path / "log-start-offset-checkpoint"
    (tmp_path / "log-start-offset-checkpoint.tmp").write_text("half-written by a crashed run")
    write_atomically(target, "0\n0\n")
    assert target.read_text() == "0\n0\n"
    assert sorted(os.listdir(tmp_path)) == ["log-start-offset-checkpoint"]
