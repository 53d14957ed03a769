"""Reading back what gateways publish of the consumer groups they carry (``__tierkeeper_gateway_groups``),
as the cleanup reads it (group_sightings.latest_sightings), and Kafka's own view of a group's members."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from harness.gateway import GatewayProcess
from storage_core.gateway.group_sightings import SIGHTINGS_TOPIC, GroupSighting, latest_sightings

from .conftest import Tiered

T = TypeVar("T")
DEADLINE_S = 120.0
"""Generous: the machine may be busy (a deadline bounds a wait, it never measures one)."""


def read_sightings(bootstrap: str, **config: str) -> dict[str, list[GroupSighting]]:
    """The topic from its start to its end, read directly from the brokers (empty while it does not
    exist)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"sightings-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **config,
        }
    )
    try:
        try:
            _, end = consumer.get_watermark_offsets(TopicPartition(SIGHTINGS_TOPIC, 0), timeout=10)
        except KafkaException:
            return {}
        records: list[tuple[bytes | None, bytes | None]] = []
        if end > 0:
            consumer.assign([TopicPartition(SIGHTINGS_TOPIC, 0, OFFSET_BEGINNING)])
            while True:
                msg = consumer.poll(10)
                assert msg is not None, f"{SIGHTINGS_TOPIC}: no record or end within 10 s"
                if msg.error():
                    assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                    if msg.offset() >= end:
                        break
                    continue
                records.append((msg.key(), msg.value()))
        return latest_sightings(records)
    finally:
        consumer.close()


def sighting_of(bootstrap: str, group: str, gateway: str, **config: str) -> GroupSighting | None:
    """The latest record ``gateway`` wrote of ``group``."""
    return next((s for s in read_sightings(bootstrap, **config).get(group, []) if s.gateway == gateway), None)


def described_members(bootstrap: str, group: str, **config: str) -> set[str]:
    """The group's members as Kafka describes them (member ids; group.instance.ids of static members)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **config})
    description = admin.describe_consumer_groups([group])[group].result(30)
    return {m.member_id for m in description.members} | {
        m.group_instance_id for m in description.members if m.group_instance_id
    }


def poll_until(
    probe: Callable[[], T | None],
    what: str,
    step: Callable[[], object] = lambda: time.sleep(0.2),
    timeout_s: float = DEADLINE_S,
) -> T:
    """``probe``'s first truthy answer within ``timeout_s``, calling ``step`` between tries (a consumer's
    poll, which keeps it in its group); fails the test with ``what`` past the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        step()


def subscribed(bootstrap: str, topic: str, group: str, **config: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **config,
        }
    )
    consumer.subscribe([topic])
    return consumer


def keep_polling(*consumers: Consumer) -> None:
    for consumer in consumers:
        msg = consumer.poll(0.2)
        assert msg is None or not msg.error() or msg.error().code() == -191, msg.error()


def gateway_id(gateway: GatewayProcess) -> str:
    """The id a gateway started without --gateway-id reports under (HOSTNAME:PORT)."""
    return f"{socket.gethostname()}:{gateway.port}"


def published(tiered: Tiered, group: str, wanted: set[str]) -> Callable[[], GroupSighting | None]:
    """A probe: the gateway's latest sighting of ``group`` once it lists every id of ``wanted``."""

    def probe() -> GroupSighting | None:
        found = sighting_of(tiered.cluster.bootstrap_servers, group, gateway_id(tiered.gateway))
        return found if found is not None and wanted <= set(found.members) else None

    return probe


def written_empty(tiered: Tiered, group: str) -> Callable[[], GroupSighting | None]:
    """A probe: the gateway's latest sighting of ``group`` once it carries no member of it."""

    def probe() -> GroupSighting | None:
        found = sighting_of(tiered.cluster.bootstrap_servers, group, gateway_id(tiered.gateway))
        return found if found is not None and not found.members else None

    return probe


def mixed_group(tiered: Tiered, topic: str, group: str) -> tuple[Consumer, Consumer, set[str]]:
    """Two members of ``group`` on ``topic``, one through the gateway and one reading the brokers directly,
    once Kafka describes both and the gateway has published its own: (through, direct, the ids Kafka
    describes). The caller closes both consumers."""
    direct = tiered.cluster.bootstrap_servers
    through, beside = subscribed(tiered.gateway.bootstrap, topic, group), subscribed(direct, topic, group)
    try:
        members = poll_until(
            lambda: (
                (m := described_members(direct, group)) and {through.memberid(), beside.memberid()} <= m and m
            ),
            "both consumers are members",
            lambda: keep_polling(through, beside),
        )
        poll_until(
            published(tiered, group, {through.memberid()}),
            "the gateway publishes its member",
            lambda: keep_polling(through, beside),
        )
    except BaseException:
        through.close()
        beside.close()
        raise
    return through, beside, members
