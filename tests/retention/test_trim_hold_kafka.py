"""Consumer groups that read the brokers directly hold the local trim, on a real broker: nothing after their
commit is lost (auto.offset.reset latest or earliest, classic and KIP-848 groups), the trim advances once
they catch up, empty, deleted and ignored groups, the bound, gateway sightings, unknown group information
and ``--no-trim-hold``."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore
from storage_core.api.trim_hold import TrimHold
from storage_core.gateway.group_sightings import SIGHTINGS_TOPIC, GroupSighting, encode_sighting
from storage_core.jobs.cleanup import CleanupOptions, run_cleanup
from storage_core.remote.catalog import list_topics, read_trim_hold_state
from storage_core.remote.layout import RemoteLayout
from storage_core.remote.metadata import SegmentMetadata

from .conftest import TieredTopic, make_topic

HOUR = 3600 * 1000
COORDINATOR_BUSY = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)
DEADLINE_S = 90.0


@pytest.fixture
def topic(kafka_broker: KafkaCluster, tmp_path: Path) -> TieredTopic:
    """A tiered topic of its own (the trim moves the broker's log start for good)."""
    return make_topic(kafka_broker, f"hold-{uuid.uuid4().hex[:8]}", tmp_path / "tier")


def _remote(topic: TieredTopic, tmp_path: Path) -> Path:
    return topic.fresh_remote(tmp_path / "remote")


def _cleanup(
    topic: TieredTopic, remote: Path, *flags: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """``tierkeeper cleanup --json`` of the topic with a local window that trims everything tiered."""
    proc = topic.cleanup(remote, "--local-retention-bytes", "1", *flags, env=env)
    return proc.returncode, json.loads(proc.stdout)


def _member(topic: TieredTopic, group: str, *, protocol: str = "classic", reset: str = "latest") -> Consumer:
    config: dict[str, Any] = {
        "bootstrap.servers": topic.bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": reset,
        "enable.auto.commit": False,
    }
    if protocol == "classic":
        config["session.timeout.ms"] = 10_000
    consumer = Consumer(config)
    consumer.subscribe([topic.topic])
    return consumer


def _join(consumers: list[Consumer], group: str, bootstrap: str) -> None:
    """Poll ``consumers`` (without reading: paused) until Kafka describes ``group`` with all of them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.2)
            if consumer.assignment():
                consumer.pause(consumer.assignment())
        try:
            described = admin.describe_consumer_groups([group])[group].result(30)
        except KafkaException as exc:
            assert exc.args[0].code() in COORDINATOR_BUSY, exc  # still loading, at the session's start
            continue
        if len(described.members) == len(consumers) and sum(len(c.assignment()) for c in consumers) == 1:
            return
    raise AssertionError(f"group {group} did not form with {len(consumers)} members")


def _commit(consumer: Consumer, topic: str, offset: int) -> None:
    consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)


def _simple_commit(topic: TieredTopic, group: str, offset: int) -> None:
    """A commit of a group with no members (as a job that assigns partitions and commits leaves)."""
    consumer = Consumer({"bootstrap.servers": topic.bootstrap, "group.id": group})
    try:
        _commit(consumer, topic.topic, offset)
    finally:
        consumer.close()


def _held(
    topic: TieredTopic, tmp_path: Path, name: str, segment: int, into: int
) -> tuple[Path, list[SegmentMetadata], str, int]:
    """A fresh tier of the topic and a group with no members that committed ``into`` offsets into the tiered
    ``segment``: (tier, its segments, group, committed offset)."""
    remote = _remote(topic, tmp_path)
    segments = topic.segments(remote)
    group, committed = f"{name}-{topic.topic}", segments[segment].base_offset + into
    _simple_commit(topic, group, committed)
    return remote, segments, group, committed


def _read_rest(topic: TieredTopic, group: str, high: int, **kw: str) -> list[int]:
    """Resume ``group`` from its commit, read up to ``high`` and commit there: the offsets it got."""
    consumer = _member(topic, group, **kw)
    out: list[int] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while (not out or out[-1] < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            out.append(msg.offset())
        _commit(consumer, topic.topic, high)
    finally:
        consumer.close()
    return out


def _offsets(topic: TieredTopic) -> tuple[int, int]:
    admin = KafkaAdmin(topic.bootstrap)
    key = (topic.topic, 0)
    return admin.log_start_offsets([key])[key], admin.high_watermarks([key])[key]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_direct_groups_lose_nothing_and_the_trim_advances_once_they_catch_up(
    topic: TieredTopic, tmp_path: Path, protocol: str
) -> None:
    remote = _remote(topic, tmp_path)
    segments = topic.segments(remote)
    window_to = segments[-1].end_offset + 1
    low, mid = segments[2].base_offset + 7, segments[4].base_offset + 3
    latest, earliest = f"latest-{protocol}-{topic.topic}", f"earliest-{protocol}-{topic.topic}"
    members = {
        latest: _member(topic, latest, protocol=protocol, reset="latest"),
        earliest: _member(topic, earliest, protocol=protocol, reset="earliest"),
    }
    try:
        for group, consumer in members.items():
            _join([consumer], group, topic.bootstrap)
        _commit(members[latest], topic.topic, low)
        _commit(members[earliest], topic.topic, mid)

        code, dry = _cleanup(topic, remote, "--dry-run")
        assert code == 0, dry["errors"]
        expected = {
            "window_to": window_to,
            "to": low,
            "held_by": [{"group": latest, "offset": low}, {"group": earliest, "offset": mid}],
            "overridden": [],
        }
        assert dry["partitions"][0]["trim_hold"] == expected
        assert dry["partitions"][0]["local_trim"]["to"] == low
        assert _offsets(topic)[0] == 0, "a dry run trims nothing"
        store = RemoteStore(f"file://{remote}")
        ((_, topic_id),) = list_topics(store, RemoteLayout(store.root))
        layout = RemoteLayout(store.root)
        assert read_trim_hold_state(store, layout, topic.topic, topic_id).groups == {}, "nor remembers"

        code, report = _cleanup(topic, remote)
        assert code == 0, report["errors"]
        assert report["partitions"][0]["trim_hold"] == expected
        assert _offsets(topic)[0] == low
        assert set(read_trim_hold_state(store, layout, topic.topic, topic_id).groups) == {latest, earliest}
    finally:
        for consumer in members.values():
            consumer.close()

    high = _offsets(topic)[1]
    assert _read_rest(topic, latest, high, protocol=protocol, reset="latest") == list(range(low, high))
    assert _read_rest(topic, earliest, high, protocol=protocol, reset="earliest") == list(range(mid, high))

    code, report = _cleanup(topic, remote)
    assert code == 0, report["errors"]
    part = report["partitions"][0]
    assert part["trim_hold"] == {"window_to": window_to, "to": window_to, "held_by": [], "overridden": []}
    assert part["local_trim"]["to"] == window_to
    assert _offsets(topic)[0] == window_to > low


def test_empty_deleted_and_ignored_groups(topic: TieredTopic, tmp_path: Path) -> None:
    remote = _remote(topic, tmp_path)
    segments = topic.segments(remote)
    window_to = segments[-1].end_offset + 1
    deleted, empty, ignored = (f"{kind}-{topic.topic}" for kind in ("deleted", "empty", "ign"))
    _simple_commit(topic, ignored, segments[0].base_offset + 1)
    _simple_commit(topic, deleted, segments[1].base_offset + 1)
    _simple_commit(topic, empty, segments[3].base_offset + 1)
    store = RemoteStore(f"file://{remote}")
    hold = TrimHold(inactive_group_ms=HOUR, ignore_groups=["ign-*"])
    start = int(time.time() * 1000)

    def run(now_ms: int) -> dict[str, Any]:
        options = CleanupOptions(
            topics={topic.topic},
            bootstrap_servers=topic.bootstrap,
            local_retention_bytes=1,
            now_ms=now_ms,
            trim_hold=hold,
        )
        report = run_cleanup(store, options)
        assert report["errors"] == []
        held: dict[str, Any] = report["partitions"][0]["trim_hold"]
        return held

    # Empty groups never seen with members: unknown history holds; the ignored one never does.
    held = run(start)
    assert held["held_by"] == [
        {"group": deleted, "offset": segments[1].base_offset + 1},
        {"group": empty, "offset": segments[3].base_offset + 1},
    ]
    assert _offsets(topic)[0] == segments[1].base_offset + 1
    ((_, topic_id),) = list_topics(store, RemoteLayout(store.root))
    memory = read_trim_hold_state(store, RemoteLayout(store.root), topic.topic, topic_id).groups
    assert memory[empty].empty_since_ms == start and set(memory) == {deleted, empty, ignored}

    # A group deleted while it holds no longer holds, and is forgotten.
    admin = AdminClient({"bootstrap.servers": topic.bootstrap})
    admin.delete_consumer_groups([deleted])[deleted].result(30)
    held = run(start + 1000)
    assert held["held_by"] == [{"group": empty, "offset": segments[3].base_offset + 1}]
    assert _offsets(topic)[0] == segments[3].base_offset + 1
    memory = read_trim_hold_state(store, RemoteLayout(store.root), topic.topic, topic_id).groups
    assert set(memory) == {empty, ignored} and memory[empty].empty_since_ms == start

    # Empty for longer than inactive_group_ms: it stops holding.
    held = run(start + HOUR)
    assert held["held_by"] == [{"group": empty, "offset": segments[3].base_offset + 1}], (
        "empty for exactly the limit still holds"
    )
    assert held["to"] is None
    held = run(start + HOUR + 1)
    assert held == {"window_to": window_to, "to": window_to, "held_by": [], "overridden": []}
    assert _offsets(topic)[0] == window_to


def test_the_bound_trims_past_a_stalled_group_and_names_what_it_misses(
    topic: TieredTopic, tmp_path: Path
) -> None:
    remote, segments, stalled, committed = _held(topic, tmp_path, "stalled", 1, 5)

    # maxBytes: the held data may keep the two newest tiered segments on the brokers.
    keep = segments[-1].size_bytes + segments[-2].size_bytes
    code, report = _cleanup(
        topic, remote, "--dry-run", "--trim-hold-max-age-ms", "-1", "--trim-hold-max-bytes", str(keep)
    )
    assert code == 0, report["errors"]
    part = report["partitions"][0]
    to = segments[-2].base_offset
    assert (part["topic"], part["partition"]) == (topic.topic, 0)
    assert part["trim_hold"]["overridden"] == [
        {"group": stalled, "offset": committed, "to": to, "reason": "maxBytes"}
    ]

    # maxAge: segments whose newest record is older than the bound go whatever holds them.
    boundary = (segments[3].max_timestamp + segments[4].max_timestamp) // 2
    age = int(time.time() * 1000) - boundary
    code, report = _cleanup(topic, remote, "--trim-hold-max-age-ms", str(age))
    assert code == 0, report["errors"]
    part = report["partitions"][0]
    to = segments[4].base_offset
    assert part["trim_hold"]["overridden"] == [
        {"group": stalled, "offset": committed, "to": to, "reason": "maxAge"}
    ]
    assert part["trim_hold"]["to"] == part["local_trim"]["to"] == to == _offsets(topic)[0]


def test_unknown_group_information_keeps_the_trim_and_no_trim_hold_is_the_old_trim(
    topic: TieredTopic, tmp_path: Path
) -> None:
    remote, segments, _, _ = _held(topic, tmp_path, "holder", 2, 0)

    code, report = _cleanup(topic, remote, env={"TIERKEEPER_FAULT": "cleanup.groups.observe:1:raise"})
    assert code == 1
    (error,) = report["errors"]
    assert error.startswith(f"{topic.topic}: trim held: consumer group offsets unavailable: injected fault")
    part = report["partitions"][0]
    assert part["trim_hold"] == {"unknown": error.removeprefix(f"{topic.topic}: trim held: ")}
    assert "local_trim" not in part
    assert _offsets(topic)[0] == 0, "the previous trim point stays"

    code, report = _cleanup(topic, remote, "--no-trim-hold")
    assert code == 0, report["errors"]
    part = report["partitions"][0]
    assert "trim_hold" not in part
    assert part["local_trim"]["to"] == segments[-1].end_offset + 1 == _offsets(topic)[0]


def _sight(topic: TieredTopic, group: str, members: tuple[str, ...]) -> None:
    """Write what a gateway would: it carried these members of ``group`` just now."""
    admin = AdminClient({"bootstrap.servers": topic.bootstrap})
    if SIGHTINGS_TOPIC not in admin.list_topics(timeout=30).topics:
        futures = admin.create_topics([NewTopic(SIGHTINGS_TOPIC, 1, 1, config={"cleanup.policy": "compact"})])
        try:
            futures[SIGHTINGS_TOPIC].result(30)
        except KafkaException as exc:  # another test of the session created it first
            assert "TOPIC_ALREADY_EXISTS" in str(exc), exc
    sighting = GroupSighting(group=group, gateway="gw-0", members=members, seen_ms=int(time.time() * 1000))
    key, value = encode_sighting(sighting)
    producer = Producer({"bootstrap.servers": topic.bootstrap})
    producer.produce(SIGHTINGS_TOPIC, key=key, value=value)
    assert producer.flush(30) == 0


def test_gateway_readers_do_not_hold_and_a_group_also_read_directly_does(
    topic: TieredTopic, tmp_path: Path
) -> None:
    remote = _remote(topic, tmp_path)
    segments = topic.segments(remote)
    through, mixed = f"gw-{topic.topic}", f"mixed-{topic.topic}"
    gateway_only = [_member(topic, through)]
    both = [_member(topic, mixed), _member(topic, mixed)]
    try:
        _join(gateway_only, through, topic.bootstrap)
        _join(both, mixed, topic.bootstrap)
        _sight(topic, through, (gateway_only[0].memberid(),))
        _sight(topic, mixed, (both[0].memberid(),))  # the other member reads the brokers directly
        for consumers, offset in ((gateway_only, segments[1].base_offset), (both, segments[3].base_offset)):
            (owner,) = [c for c in consumers if c.assignment()]
            _commit(owner, topic.topic, offset)
        code, report = _cleanup(topic, remote, "--dry-run")
        assert code == 0, report["errors"]
        held = report["partitions"][0]["trim_hold"]
        assert held["held_by"] == [{"group": mixed, "offset": segments[3].base_offset}]
        assert held["to"] == segments[3].base_offset
    finally:
        for consumer in [*gateway_only, *both]:
            consumer.close()
