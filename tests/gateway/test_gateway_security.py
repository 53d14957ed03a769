"""Security through the gateway, as Kafka enforces it.

SASL/PLAIN with ACLs: a one-broker cluster with KRaft's StandardAuthorizer and two principals. SASL
passes through the gateway to the broker (the gateway never sees a credential it checks), so the broker
authenticates each client and authorizes each request on the client's own connection. ``alice`` has READ
on the topic and reads its history from offset 0 through the gateway; ``bob`` has none and gets
TOPIC_AUTHORIZATION_FAILED, and not a byte of history: the tier is only read for a partition the broker
answered OFFSET_OUT_OF_RANGE on that connection, which it does only after authorizing the read.

TLS from client to gateway: the gateway terminates TLS with its own certificate (``--tls-cert`` /
``--tls-key``) and a client that trusts its CA reads the history through it.

What cannot pass through: client certificates (mTLS). TLS ends at the gateway, so a certificate a client
presents is seen by the gateway, never by the broker; the broker sees the gateway's own connection (its
own client certificate, if the gateway is configured with one for the brokers) and cannot map the
client's certificate to a principal. Clients that must be authorized per principal use SASL through the
gateway (PLAIN or SCRAM, over TLS to the gateway), not mTLS.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from harness.gateway import GatewayProcess, tier_and_trim
from harness.kafka import KafkaCluster, SaslPlain
from harness.tls import loopback_certificates
from storage_core.gateway.group_sightings import SIGHTINGS_TOPIC
from storage_core.gateway.protocol import request_type

from .conftest import Tiered, produce, read_all
from .rawkafka import FETCH, FETCH_VERSION, RawClient, fetch_frame, frame
from .sightings import keep_polling, poll_until, sighting_of, subscribed

ADMIN = SaslPlain("admin", "admin-secret")
ALICE = SaslPlain("alice", "alice-secret")
BOB = SaslPlain("bob", "bob-secret")
CAROL = SaslPlain("carol", "carol-secret")
GATEWAY_USER = SaslPlain("gateway", "gateway-secret")
"""The principal of a gateway of its own, with no ACL until the test grants the documented ones."""
TOPIC = "secret"
PARTITIONS = 1
RECORDS = 1500
TOPIC_AUTHORIZATION_FAILED = 29
OFFSET_OUT_OF_RANGE = 1
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


@dataclass
class Secured:
    cluster: KafkaCluster
    gateway: GatewayProcess
    expected: list[tuple[int, int, bytes | None, bytes | None]]
    log_start: int


def _jaas() -> str:
    users = " ".join(f'user_{u.username}="{u.password}"' for u in (ADMIN, ALICE, BOB, CAROL, GATEWAY_USER))
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{ADMIN.username}" password="{ADMIN.password}" {users};'
    )


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    work = tmp_path_factory.mktemp("gateway-sasl")
    cluster = KafkaCluster(
        work / "kafka",
        brokers=1,
        sasl=ADMIN,
        broker_config={
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": _jaas(),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # The controller listener is PLAINTEXT: the broker's own requests to it come as ANONYMOUS.
            "super.users": "User:admin;User:ANONYMOUS",
        },
    )
    cluster.start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **ADMIN.client_config()})
        config = {"internal.segment.bytes": "65536", "retention.ms": "-1"}
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=config)])[TOPIC].result(60)
        cluster.wait_topic(TOPIC, PARTITIONS)
        produce(cluster, TOPIC, RECORDS, PARTITIONS, **ADMIN.client_config())
        expected = read_all(cluster.bootstrap_servers, TOPIC, PARTITIONS, **ADMIN.client_config())
        assert len(expected) == RECORDS
        remote = f"file://{work / 'tier'}"
        properties = ["--kafka-config-dir", str(_config_dir(work / "kafka-config", ADMIN))]
        tier_and_trim(cluster, ["--remote", remote, *properties], TOPIC)
        for binding in (
            AclBinding(
                ResourceType.TOPIC,
                TOPIC,
                ResourcePatternType.LITERAL,
                "User:alice",
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            ),
            *(
                AclBinding(
                    ResourceType.GROUP,
                    "*",
                    ResourcePatternType.LITERAL,
                    f"User:{user}",
                    "*",
                    AclOperation.READ,
                    AclPermissionType.ALLOW,
                )
                for user in ("alice", "bob")
            ),
        ):
            for future in admin.create_acls([binding]).values():
                future.result(60)
        consumer = Consumer(
            {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "probe", **ADMIN.client_config()}
        )
        log_start = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[0]
        consumer.close()
        assert log_start > 0
        gateway = GatewayProcess(
            cluster.bootstrap_servers, remote, work / "gateway", extra=properties
        ).start()
        try:
            yield Secured(cluster, gateway, expected, log_start)
        finally:
            gateway.stop()
    finally:
        cluster.stop()


def _config_dir(path: Path, user: SaslPlain) -> Path:
    """A --kafka-config-dir of ``user``'s client properties (secrets are refused as --kafka-property)."""
    path.mkdir(parents=True)
    for key, value in user.client_config().items():
        (path / key).write_text(value)
    return path


def _authenticated(address: str, user: SaslPlain) -> RawClient:
    """A raw connection through the gateway, authenticated by the broker behind it (SaslHandshake v1 and
    SaslAuthenticate v2, both passed through)."""
    from storage_core.gateway.protocol import decode_response

    c = RawClient.at(address)
    c.handshake()
    c.send(frame(SASL_HANDSHAKE, 1, request_type(SASL_HANDSHAKE, 1)(mechanism="PLAIN"), 2))
    payload = c.read_payload()
    assert payload is not None
    assert decode_response(SASL_HANDSHAKE, 1, payload).error_code == 0
    token = b"\0" + user.username.encode() + b"\0" + user.password.encode()
    c.send(frame(SASL_AUTHENTICATE, 2, request_type(SASL_AUTHENTICATE, 2)(auth_bytes=token), 3))
    payload = c.read_payload()
    assert payload is not None
    assert decode_response(SASL_AUTHENTICATE, 2, payload).error_code == 0, (
        f"{user.username} not authenticated"
    )
    return c


def _broker_address(secured: Secured) -> str:
    # One broker: node 1, at the gateway's broker port for it (base = bootstrap + 1).
    return f"127.0.0.1:{secured.gateway.port + 1 + 1}"


def test_a_principal_without_read_gets_topic_authorization_failed_and_no_history(secured: Secured) -> None:
    before = secured.gateway.metric("tierkeeper_gateway_tier_bytes_total")
    c = _authenticated(_broker_address(secured), BOB)
    try:
        for offset in (0, 1, secured.log_start - 1):
            body = c.call(FETCH, FETCH_VERSION, fetch_frame(TOPIC, {0: offset}, 10 + offset))
            (part,) = body.responses[0].partitions
            assert part.error_code == TOPIC_AUTHORIZATION_FAILED, part.error_code
            assert not part.records
    finally:
        c.close()
    assert secured.gateway.metric("tierkeeper_gateway_tier_bytes_total") == before


def test_a_principal_with_read_reads_the_history_through_the_gateway(secured: Secured) -> None:
    c = _authenticated(_broker_address(secured), ALICE)
    try:
        body = c.call(FETCH, FETCH_VERSION, fetch_frame(TOPIC, {0: 0}, 5))
        (part,) = body.responses[0].partitions
        assert part.error_code == 0 and part.records
    finally:
        c.close()
    got = read_all(secured.gateway.bootstrap, TOPIC, PARTITIONS, **ALICE.client_config())
    assert got == secured.expected
    assert secured.gateway.metric("tierkeeper_gateway_tier_bytes_total") > 0


def _carol_reads(admin: AdminClient, allow: bool) -> None:
    what = (
        ResourceType.TOPIC,
        TOPIC,
        ResourcePatternType.LITERAL,
        "User:carol",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    futures = (
        admin.create_acls([AclBinding(*what)]) if allow else admin.delete_acls([AclBindingFilter(*what)])
    )
    for future in futures.values():
        future.result(60)


def _fetch_code(c: RawClient, offset: int, correlation_id: int) -> tuple[int, bool]:
    body = c.call(FETCH, FETCH_VERSION, fetch_frame(TOPIC, {0: offset}, correlation_id))
    (part,) = body.responses[0].partitions
    return part.error_code, bool(part.records)


def test_a_revoked_read_stops_tier_answers_within_the_grant_bound(secured: Secured) -> None:
    """Fetches below the broker's log start are answered from the tier without asking the broker for up to
    ``--tier-grant-seconds`` (1 s, the default) after its OFFSET_OUT_OF_RANGE on the same connection
    (storage_core/gateway/grants.py). Once the broker enforces a revocation (seen on a direct connection
    of the same principal), every fetch the client sends more than that bound later gets the broker's
    TOPIC_AUTHORIZATION_FAILED, and no history."""
    bound_s = 1.0
    admin = AdminClient({"bootstrap.servers": secured.cluster.bootstrap_servers, **ADMIN.client_config()})
    direct = _authenticated(secured.cluster.bootstrap_servers, CAROL)
    c = _authenticated(_broker_address(secured), CAROL)
    try:
        _carol_reads(admin, True)
        deadline = time.monotonic() + 60
        while _fetch_code(direct, 0, 4)[0] != OFFSET_OUT_OF_RANGE:  # the grant reached the broker
            assert time.monotonic() < deadline, "carol's READ never took effect"
        granted = secured.gateway.metric("tierkeeper_gateway_granted_fetches_total")
        # Through the gateway: history, the later fetches of it under the first one's grant.
        offset = 0
        for i in range(20):
            code, records = _fetch_code(c, offset, 10 + i)
            assert code == 0 and records
        assert secured.gateway.metric("tierkeeper_gateway_granted_fetches_total") > granted, (
            "no fetch was answered under a grant"
        )
        _carol_reads(admin, False)
        deadline = time.monotonic() + 60
        while _fetch_code(direct, 0, 5)[0] != TOPIC_AUTHORIZATION_FAILED:
            assert time.monotonic() < deadline, "the revocation never took effect at the broker"
        enforced_at = time.monotonic()  # the broker enforces it no later than this
        answered_after_bound = 0
        i = 100
        while answered_after_bound < 3:
            i += 1
            sent_at = time.monotonic()
            code, records = _fetch_code(c, offset, i)
            if sent_at >= enforced_at + bound_s:
                assert code == TOPIC_AUTHORIZATION_FAILED and not records, (
                    f"a fetch sent {sent_at - enforced_at:.2f} s after the revocation got {code}, "
                    f"records: {records}"
                )
                answered_after_bound += 1
            else:
                assert code in (0, TOPIC_AUTHORIZATION_FAILED), code
    finally:
        c.close()
        direct.close()


# ---- TLS from client to gateway -----------------------------------------------------------------------
def test_a_tls_client_reads_the_history_through_the_gateways_own_certificate(
    tiered: Tiered, tmp_path: Path
) -> None:
    ca, cert, key = loopback_certificates(tmp_path / "pki")
    gateway = GatewayProcess(
        tiered.cluster.bootstrap_servers,
        tiered.remote,
        tmp_path / "gateway",
        extra=["--tls-cert", str(cert), "--tls-key", str(key)],
    ).start()
    try:
        tls = {"security.protocol": "SSL", "ssl.ca.location": str(ca)}
        assert read_all(gateway.bootstrap, tiered.topic, **tls) == tiered.expected
        assert gateway.metric("tierkeeper_gateway_tier_bytes_total") > 0
        # Without TLS the gateway's listener does not speak Kafka: the plaintext request gets no answer.
        c = RawClient.at(gateway.bootstrap, timeout=10)
        try:
            from .rawkafka import api_versions_frame

            c.send(api_versions_frame(1))
            assert c.closed_by_peer(30), "a plaintext request was answered on the TLS listener"
        finally:
            c.close()
    finally:
        gateway.stop()


# ---- the gateway's own principal and the group sightings topic ---------------------------------------------
def _allow_sightings(admin: AdminClient, principal: str) -> None:
    """The ACLs docs/gateway.md lists for a gateway's principal on the sightings topic."""
    for operation in (AclOperation.DESCRIBE, AclOperation.CREATE, AclOperation.WRITE):
        binding = AclBinding(
            ResourceType.TOPIC,
            SIGHTINGS_TOPIC,
            ResourcePatternType.LITERAL,
            principal,
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for future in admin.create_acls([binding]).values():
            future.result(60)


def test_a_gateway_that_may_not_write_the_sightings_topic_serves_its_clients_and_publishes_once_allowed(
    secured: Secured, tmp_path: Path
) -> None:
    """The gateway's own principal has no ACL: creating and writing the sightings topic fail, and a
    consumer group reads every record through it all the same, the failures counted and the gateway
    ready. Once the principal gets the ACLs the docs list, the gateway's next attempt publishes the group
    with its member, with no restart."""
    direct = secured.cluster.bootstrap_servers
    gateway = GatewayProcess(
        direct,
        secured.gateway.remote,
        tmp_path / "gateway",
        extra=[
            "--kafka-config-dir",
            str(_config_dir(tmp_path / "kafka-config", GATEWAY_USER)),
            "--gateway-id",
            "gateway-unauthorized",
        ],
    ).start()
    group = f"alice-{uuid.uuid4().hex[:8]}"
    consumer = subscribed(gateway.bootstrap, TOPIC, group, **ALICE.client_config())
    try:
        got = []
        while len(got) < RECORDS:
            msg = consumer.poll(30)
            assert msg is not None, f"stalled after {len(got)} records"
            assert not msg.error(), msg.error()
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        assert sorted(got) == secured.expected
        poll_until(
            lambda: gateway.metric("tierkeeper_gateway_group_sightings_failures_total") > 0,
            "the refused writes are counted",
            lambda: keep_polling(consumer),
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{gateway.metrics_port}/readyz", timeout=10) as ready:
            assert ready.status == 200
        admin = AdminClient({"bootstrap.servers": direct, **ADMIN.client_config()})
        _allow_sightings(admin, f"User:{GATEWAY_USER.username}")
        member = consumer.memberid()
        sighting = poll_until(
            lambda: (
                (s := sighting_of(direct, group, "gateway-unauthorized", **ADMIN.client_config()))
                and member in s.members
                and s
            ),
            "the gateway publishes the group once its principal may",
            lambda: keep_polling(consumer),
        )
        assert sighting.members == (member,)
    finally:
        consumer.close()
        gateway.stop()
