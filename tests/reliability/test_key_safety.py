"""No remote key can leave its prefix: every component is checked in storage_core/remote/layout.py."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.tierkeeper_cli import run_cli
from storage_core.adapters.store import RemoteStore
from storage_core.remote.catalog import list_topics
from storage_core.remote.layout import (
    RemoteLayout,
    SegmentObject,
    SegmentState,
    TopicPartitionId,
    UnsafeKeyError,
    parse_topic_dir,
)

TOPIC_ID = "q0nC4cY1Rk2H9b8hQ1XW3w"
SEGMENT = uuid.UUID("12345678-1234-5678-1234-567812345678")
HOSTILE_TOPICS = [
    "../x",
    "..",
    ".",
    "a/b",
    "/abs",
    "%2e%2e",
    "%2e%2e%2fx",
    "a\x00b",
    "a\\b",
    "a b",
    "x\n",
    "",
    "t" * 250,
    "caf\u00e9",
    "a:b",
    "a*b",
]
LAYOUT = RemoteLayout("bucket/tenant-a/tier")


def _every_key(layout: RemoteLayout, tp: TopicPartitionId) -> list[str]:
    return [
        layout.topic_dir(tp.topic, tp.topic_id),
        layout.partition_dir(tp),
        layout.manifest_key(tp),
        layout.partition_state_key(tp),
        *(layout.object_key(tp, 0, SEGMENT, obj) for obj in SegmentObject),
        *(layout.marker_key(tp, 0, SEGMENT, state) for state in SegmentState),
        layout.recovery_dir(tp.topic, tp.topic_id, TOPIC_ID),
    ]


@pytest.mark.parametrize("topic", HOSTILE_TOPICS, ids=repr)
def test_hostile_topic_names_never_become_keys(topic: str) -> None:
    tp = TopicPartitionId(topic, TOPIC_ID, 0)
    for build in (
        lambda: LAYOUT.topic_dir(topic, TOPIC_ID),
        lambda: LAYOUT.partition_dir(tp),
        lambda: LAYOUT.manifest_key(tp),
        lambda: LAYOUT.object_key(tp, 0, SEGMENT, SegmentObject.LOG),
        lambda: LAYOUT.marker_key(tp, 0, SEGMENT, SegmentState.COPY_FINISHED),
        lambda: LAYOUT.recovery_dir(topic, TOPIC_ID, TOPIC_ID),
    ):
        with pytest.raises(UnsafeKeyError, match="not a legal Kafka topic name") as refused:
            build()
        assert "\x00" not in str(refused.value) and "\n" not in str(refused.value), "one printable line"
        assert len(str(refused.value)) < 300, "a 250-character name is shortened in the message"


@pytest.mark.parametrize(
    "topic_id",
    ["", "../../../../../../../x", "q0nC4cY1Rk2H9b8hQ1XW3/", "q0nC4cY1Rk2H9b8hQ1XW3w/..", "%2e" * 7 + "x"],
)
def test_hostile_topic_ids_never_become_keys(topic_id: str) -> None:
    with pytest.raises(UnsafeKeyError, match="22 base64url"):
        LAYOUT.topic_dir("orders", topic_id)
    with pytest.raises(UnsafeKeyError, match="22 base64url"):
        LAYOUT.recovery_dir("orders", TOPIC_ID, topic_id)


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        (lambda: LAYOUT.partition_dir(TopicPartitionId("orders", TOPIC_ID, -1)), "partition -1"),
        (lambda: LAYOUT.partition_dir(TopicPartitionId("orders", TOPIC_ID, "0/../1")), "partition '0/../1'"),  # type: ignore[arg-type]
        (lambda: LAYOUT.partition_dir(TopicPartitionId("orders", TOPIC_ID, True)), "partition True"),
        (
            lambda: LAYOUT.object_key(
                TopicPartitionId("orders", TOPIC_ID, 0), -5, SEGMENT, SegmentObject.LOG
            ),
            "base offset -5",
        ),
        (
            lambda: LAYOUT.object_key(TopicPartitionId("orders", TOPIC_ID, 0), 0, "../x", SegmentObject.LOG),
            "segment id",
        ),  # type: ignore[arg-type]
    ],
)
def test_partitions_offsets_and_segment_ids_are_checked(build: object, problem: str) -> None:
    with pytest.raises(UnsafeKeyError, match=problem.replace("(", r"\(")):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(
    "topic", ["orders", "a" * 249, "...", ".hidden", "-_.", "__consumer_offsets", "A.b-C_9"]
)
def test_legal_names_stay_under_the_prefix(topic: str) -> None:
    for key in _every_key(LAYOUT, TopicPartitionId(topic, TOPIC_ID, 7)):
        assert key.startswith("bucket/tenant-a/tier/"), key
        assert ".." not in key.split("/"), key
        assert key.split("/")[3] == f"{topic}-{TOPIC_ID}", key


@given(st.text(max_size=300))
def test_any_text_is_refused_or_stays_in_its_own_directory(topic: str) -> None:
    try:
        keys = _every_key(LAYOUT, TopicPartitionId(topic, TOPIC_ID, 0))
    except UnsafeKeyError:
        return
    for key in keys:
        parts = key.split("/")
        assert parts[:3] == ["bucket", "tenant-a", "tier"] and parts[3] == f"{topic}-{TOPIC_ID}"
        assert all(p not in ("", ".", "..") for p in parts), key


@pytest.mark.parametrize("name", [f"..-{TOPIC_ID}", f"a b-{TOPIC_ID}", f"%2e%2e-{TOPIC_ID}", f"-{TOPIC_ID}"])
def test_planted_directories_are_not_taken_for_topics(tmp_path: Path, name: str) -> None:
    assert parse_topic_dir(name) is None
    root = tmp_path / "tier"
    planted = root / name.replace("..", "%2e%2e") if name.startswith("..") else root / name
    (planted / "0").mkdir(parents=True)
    (planted / "0" / "segments.manifest.json").write_text("{}")
    (root / f"orders-{TOPIC_ID}" / "0").mkdir(parents=True)
    store = RemoteStore(f"file://{root}")
    assert list_topics(store, RemoteLayout(store.root)) == [("orders", TOPIC_ID)]


@pytest.mark.parametrize("topic", ["../x", "a/b", "%2e%2e", "t" * 250])
def test_the_cli_refuses_hostile_topics_in_one_line(tmp_path: Path, topic: str) -> None:
    remote = tmp_path / "tier"
    remote.mkdir()
    for argv in (
        ("read", "--remote", f"file://{remote}", "--topic", topic, "--partition", "0", "--from-offset", "0"),
        ("ls", "--remote", f"file://{remote}", "--topic", topic),
        ("cleanup", "--remote", f"file://{remote}", "--delete-topic", topic),
    ):
        proc = run_cli(*argv)
        assert proc.returncode != 0, argv
        assert "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert sorted(p.name for p in tmp_path.rglob("*")) == ["tier"], "nothing created"
