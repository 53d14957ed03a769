"""The gateway tells the trim which consumer groups it carries: consumers of both group protocols reading
through it appear on ``__tierkeeper_gateway_groups`` with the member ids Kafka describes (so the cleanup
finds no direct member in them), a member of the same group reading the brokers directly is found direct,
a member that leaves or whose connection dies is no longer carried, and a group request the gateway's
codec cannot read still passes through untouched."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from storage_core.gateway.group_members import HEARTBEAT
from storage_core.gateway.group_sightings import direct_members
from storage_core.gateway.protocol import request_type

from .conftest import Tiered
from .rawkafka import RawClient, frame
from .sightings import (
    described_members,
    keep_polling,
    mixed_group,
    poll_until,
    published,
    read_sightings,
    subscribed,
    written_empty,
)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_read_through_the_gateway_is_published_with_the_member_ids_kafka_describes(
    tiered: Tiered, protocol: str
) -> None:
    direct = tiered.cluster.bootstrap_servers
    group = f"through-{protocol}-{uuid.uuid4().hex[:8]}"
    consumer = subscribed(tiered.gateway.bootstrap, tiered.topic, group, **{"group.protocol": protocol})
    try:
        first = poll_until(lambda: consumer.poll(1.0), "a first record through the gateway", lambda: None)
        assert not first.error(), first.error()
        members = poll_until(
            lambda: (m := described_members(direct, group)) and consumer.memberid() in m and m,
            "Kafka describes the consumer as a member",
            lambda: keep_polling(consumer),
        )
        sighting = poll_until(
            published(tiered, group, members),
            f"the gateway publishes {members}",
            lambda: keep_polling(consumer),
        )
        assert sighting.protocol == protocol
        assert set(sighting.members) == members
        now_ms = int(time.time() * 1000)
        assert direct_members(members, read_sightings(direct), group, now_ms) == set()
    finally:
        consumer.close()  # leaves the group (LeaveGroup, or a heartbeat with member epoch -1)
    left = poll_until(written_empty(tiered, group), "the gateway writes the group empty after the leave")
    assert left.protocol == protocol
    assert direct_members({"anyone"}, read_sightings(direct), group, left.seen_ms) == {"anyone"}


def test_a_member_of_the_same_group_reading_directly_shows_up_as_direct(tiered: Tiered) -> None:
    direct = tiered.cluster.bootstrap_servers
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    through, beside, members = mixed_group(tiered, tiered.topic, group)
    try:
        now_ms = int(time.time() * 1000)
        assert direct_members(members, read_sightings(direct), group, now_ms) == {beside.memberid()}
    finally:
        through.close()
        beside.close()


CONSUME_UNTIL_KILLED = """
import sys
from confluent_kafka import Consumer
bootstrap, topic, group = sys.argv[1:4]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
c.subscribe([topic])
told = False
while True:
    c.poll(0.2)
    if not told and c.assignment() and c.memberid():
        print(c.memberid(), flush=True)
        told = True
"""


def test_a_member_whose_connection_dies_without_leaving_is_no_longer_carried(tiered: Tiered) -> None:
    group = f"killed-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [sys.executable, "-c", CONSUME_UNTIL_KILLED, tiered.gateway.bootstrap, tiered.topic, group],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        member = proc.stdout.readline().strip()
        assert member, "the consumer ended before joining its group"
        poll_until(published(tiered, group, {member}), "the gateway publishes the member")
    finally:
        proc.kill()  # SIGKILL: no LeaveGroup, the gateway only sees the connection close
        proc.wait(30)
    poll_until(written_empty(tiered, group), "the gateway writes the group empty once its connection closed")


def test_a_group_request_the_codec_cannot_read_passes_through_untouched(tiered: Tiered) -> None:
    """A Heartbeat with a tagged field unknown to the gateway's codec (Kafka ignores unknown tags; the
    codec refuses them): the broker's answer reaches the client byte for byte as it does directly, the
    connection stays open, and the gateway counts the request as not read for group tracking."""
    body = request_type(HEARTBEAT, 4)(group_id=f"odd-{uuid.uuid4().hex[:8]}", generation_id=1, member_id="m")
    plain = frame(HEARTBEAT, 4, body, 41)
    assert plain.endswith(b"\x00")  # no tagged fields
    payload = plain[4:-1] + b"\x01\x05\x01\x00"  # one: tag 5, one byte
    odd = len(payload).to_bytes(4, "big") + payload
    unread = "tierkeeper_gateway_group_requests_unread_total"
    before = tiered.gateway.metric(unread)
    answers = []
    for address in (tiered.cluster.bootstrap_servers.split(",")[0], tiered.gateway.bootstrap):
        client = RawClient.at(address)
        try:
            client.send(odd)
            answers.append(client.read_payload())
            client.handshake()  # still open and serving
        finally:
            client.close()
    assert answers[0] is not None and answers[1] == answers[0]
    assert tiered.gateway.metric(unread) == before + 1


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_static_member_of_kafkas_java_consumer_is_published_with_its_instance_id(
    tiered: Tiered, protocol: str
) -> None:
    """Kafka's own console consumer, a static member (group.instance.id) of a classic or KIP-848 group."""
    direct = tiered.cluster.bootstrap_servers
    group, instance = f"java-{protocol}-{uuid.uuid4().hex[:8]}", f"static-{uuid.uuid4().hex[:6]}"
    proc = subprocess.Popen(
        tiered.cluster.tool_command(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            "--bootstrap-server",
            tiered.gateway.bootstrap,
            "--topic",
            tiered.topic,
            "--group",
            group,
            "--from-beginning",
            "--timeout-ms",
            "240000",
            "--consumer-property",
            f"group.protocol={protocol}",
            "--consumer-property",
            f"group.instance.id={instance}",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        members = poll_until(
            lambda: (m := described_members(direct, group)) and instance in m and m,
            "Kafka describes the Java consumer as a static member",
        )
        sighting = poll_until(published(tiered, group, members), f"the gateway publishes {members}")
        assert sighting.protocol == protocol and instance in sighting.members
        assert direct_members(members, read_sightings(direct), group, int(time.time() * 1000)) == set()
    finally:
        proc.terminate()  # the consumer closes (a static member leaves for now, or only disconnects)
        _, stderr = proc.communicate(timeout=60)
    poll_until(
        written_empty(tiered, group), f"the group written empty after the consumer stopped: {stderr[-500:]}"
    )
