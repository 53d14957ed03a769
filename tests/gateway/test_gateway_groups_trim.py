"""End to end with ``tierkeeper cleanup``'s trim hold: a consumer group that reads through the gateway does
not hold the trim (the gateway says it carries it) and still reads every record after its commit, the part
below the brokers' new log start from the tier; the same group with one extra member reading the brokers
directly holds the trim at its commit."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Consumer, TopicPartition

from harness.gateway import tier_and_trim
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore
from storage_core.remote.reader import RemoteReader

from .conftest import Record, Tiered, create_topic, produce, read_all
from .sightings import keep_polling, mixed_group, poll_until, published, subscribed, written_empty

BATCH = 3000
"""Records per phase: about eight 64 KiB segments of one partition."""
COMMIT_INTO = 300
"""Where the group commits, counted from the phase's first offset: inside the phase's first segments."""


def log_start(tiered: Tiered, topic: str) -> int:
    key = (topic, 0)
    return KafkaAdmin(tiered.cluster.bootstrap_servers).log_start_offsets([key])[key]


def tiered_end(tiered: Tiered, topic: str) -> int:
    """The last offset the tier holds of the topic's partition 0."""
    with RemoteReader(RemoteStore(tiered.remote)) as reader:
        return reader.manifest(reader.resolve(topic, 0), refresh=True).segments[-1].end_offset


def read_until(consumer: Consumer, end: int) -> list[Record]:
    """What ``consumer`` reads until it has offset ``end - 1``."""
    got: list[Record] = []
    while not got or got[-1][1] < end - 1:
        msg = consumer.poll(30)
        assert msg is not None, f"stalled after {len(got)} records"
        assert not msg.error(), msg.error()
        got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    return got


def commit(consumer: Consumer, topic: str, offset: int) -> None:
    consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)


def simple_commit(bootstrap: str, topic: str, group: str, offset: int) -> None:
    """A commit for ``group`` while it has no member (as a job that assigns partitions and commits)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        commit(consumer, topic, offset)
    finally:
        consumer.close()


def test_a_group_read_through_the_gateway_does_not_hold_the_trim_and_one_direct_member_makes_it_hold(
    tiered: Tiered,
) -> None:
    cluster, gateway = tiered.cluster, tiered.gateway
    topic, group = f"gw-hold-{uuid.uuid4().hex[:8]}", f"gw-hold-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, 1)
    produce(cluster, topic, BATCH, partitions=1)
    expected = read_all(cluster.bootstrap_servers, topic, 1)

    # 1. The group reads part of the topic through the gateway, commits and leaves: not held.
    consumer = subscribed(gateway.bootstrap, topic, group)
    try:
        read_until(consumer, COMMIT_INTO)
        commit(consumer, topic, COMMIT_INTO)
        poll_until(published(tiered, group, {consumer.memberid()}), "the gateway publishes the group")
    finally:
        consumer.close()
    poll_until(written_empty(tiered, group), "the gateway writes the group empty after it left")
    tier_and_trim(cluster, ["--remote", tiered.remote], topic)
    assert log_start(tiered, topic) > COMMIT_INTO, "the trim was held for a group read through the gateway"
    consumer = subscribed(gateway.bootstrap, topic, group)
    try:
        got = read_until(consumer, BATCH)
        commit(consumer, topic, BATCH)
    finally:
        consumer.close()
    assert got == expected[COMMIT_INTO:], "the group did not read every record after its commit once"

    # 2. The same group, one member through the gateway and one direct, both paused once they have joined
    # (no commit of theirs moves the group's): held at the commit.
    produce(cluster, topic, BATCH, partitions=1)
    held_at = BATCH + COMMIT_INTO
    simple_commit(cluster.bootstrap_servers, topic, group, held_at)
    through, beside, _ = mixed_group(tiered, topic, group)
    try:
        # The cleanup runs while both stay in the group (polled meanwhile, without reading on).
        for consumer in (through, beside):
            consumer.pause(consumer.assignment())
        with ThreadPoolExecutor(max_workers=1) as pool:
            trim = pool.submit(tier_and_trim, cluster, ["--remote", tiered.remote], topic)
            poll_until(
                trim.done, "copy and cleanup end", lambda: keep_polling(through, beside), timeout_s=600
            )
            trim.result()  # a failed copy or cleanup raises its own error here
    finally:
        through.close()
        beside.close()
    assert tiered_end(tiered, topic) > held_at, "the tier must reach past the commit for the hold to matter"
    assert log_start(tiered, topic) <= held_at, "a direct member's commit did not hold the trim"
