"""Segment file and partition directory names as Kafka spells them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage_core.formats.segment_files import (
    SegmentFileKind,
    SegmentFileName,
    TopicPartition,
    is_valid_topic_name,
    offset_prefix,
    parse_partition_dir_name,
    parse_segment_file_name,
    segment_file_name,
)

TOPICS = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=40).filter(lambda t: t not in (".", ".."))


@given(st.integers(min_value=0, max_value=2**63 - 1), st.sampled_from(list(SegmentFileKind)))
def test_segment_names_round_trip(offset: int, kind: SegmentFileKind) -> None:
    name = segment_file_name(offset, kind)
    assert name == f"{offset:020d}{kind.value}" and len(name.split(".")[0]) == 20
    assert parse_segment_file_name(name) == SegmentFileName(offset, kind)
    assert str(SegmentFileName(offset, kind)) == name


@pytest.mark.parametrize(
    "name",
    [
        "00000000000000000000.log.deleted",
        "00000000000000000000.log.swap",
        "00000000000000000000.index.cleaned",
        "0000000000000000000.log",
        "00000000000000000000.txt",
        "leader-epoch-checkpoint",
        "partition.metadata",
    ],
)
def test_non_segment_files_are_not_parsed(name: str) -> None:
    assert parse_segment_file_name(name) is None


@given(TOPICS, st.integers(min_value=0, max_value=100_000))
def test_partition_dirs_round_trip_even_with_dashes_in_topics(topic: str, partition: int) -> None:
    tp = TopicPartition(topic, partition)
    assert parse_partition_dir_name(str(tp)) == tp


@pytest.mark.parametrize(
    "name",
    [
        "orders-0.9f3c2a0e5b8d4c1f8a7e6d5c4b3a2910-delete",
        "orders-0.9f3c2a0e5b8d4c1f8a7e6d5c4b3a2910-future",
        "orders-0-stray",
        "orders",
        "orders-x",
        "-3",
        "bad topic-1",
    ],
)
def test_non_live_or_foreign_dirs_are_not_partitions(name: str) -> None:
    assert parse_partition_dir_name(name) is None


def test_topic_name_rules() -> None:
    assert is_valid_topic_name("a.b_c-D9")
    assert not is_valid_topic_name("with space")
    assert not is_valid_topic_name("x" * 250)
    assert not is_valid_topic_name("..")
    with pytest.raises(ValueError):
        offset_prefix(-1)
