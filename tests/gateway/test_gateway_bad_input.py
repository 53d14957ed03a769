"""Bad input on raw sockets against the running gateway: a malformed frame, a negative or oversized frame
size, an unknown API key, a truncated header, a client that disconnects mid-response. Each time that
connection gets an error or is closed, and the gateway and its other clients go on: a neighbour raw
connection opened before keeps being answered, and a confluent-kafka consumer reading the history through
the gateway reads its next records after every case and ends with every record once.

And good input in awkward pieces: a request split at every byte boundary is answered exactly as when sent
whole; pipelined requests of different APIs are answered in the order they were sent.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from storage_core.gateway.protocol import decode_response

from .conftest import PARTITIONS, RECORDS, Record, Tiered
from .rawkafka import (
    API_VERSIONS,
    FETCH,
    FETCH_VERSION,
    LIST_OFFSETS,
    METADATA,
    RawClient,
    api_versions_frame,
    correlation_of,
    fetch_frame,
    leaders,
    list_offsets_frame,
    metadata_frame,
    new_group,
)

STEP = 150
"""Records the neighbour consumer reads after each case (3000 records, a dozen cases)."""


@dataclass
class Neighbours:
    raw: RawClient
    consumer: Consumer
    got: list[Record]

    def still_served(self, tiered: Tiered) -> None:
        """The neighbour connection answers, and the consumer reads its next records."""
        assert self.raw.call(API_VERSIONS, 3, api_versions_frame(77)).error_code == 0
        want = min(len(self.got) + STEP, RECORDS)
        while len(self.got) < want:
            msg = self.consumer.poll(30)
            assert msg is not None, f"the consumer stalled after {len(self.got)} records"
            assert not msg.error(), msg.error()
            self.got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))


@pytest.fixture(scope="module")
def neighbours(tiered: Tiered) -> Iterator[Neighbours]:
    raw = RawClient.at(tiered.gateway.bootstrap)
    raw.handshake()
    consumer = Consumer(
        {
            "bootstrap.servers": tiered.gateway.bootstrap,
            "group.id": new_group(),
            "enable.auto.commit": False,
            # Small fetches: the consumer goes on fetching history across the cases, not in one go.
            "message.max.bytes": 4096,
            "fetch.max.bytes": 8192,
            "max.partition.fetch.bytes": 2048,
            "queued.max.messages.kbytes": 16,
        }
    )
    consumer.assign([TopicPartition(tiered.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    n = Neighbours(raw, consumer, [])
    try:
        yield n
    finally:
        consumer.close()
        raw.close()


@pytest.fixture
def client(tiered: Tiered) -> Iterator[RawClient]:
    c = RawClient.at(tiered.gateway.bootstrap)
    try:
        yield c
    finally:
        c.close()


def _errors(tiered: Tiered) -> float:
    return tiered.gateway.metric("tierkeeper_gateway_client_protocol_errors_total")


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(struct.pack(">i", -1), id="negative-size"),
        pytest.param(struct.pack(">i", -(2**31)), id="most-negative-size"),
        pytest.param(struct.pack(">i", (100 << 20) + 1) + b"x" * 64, id="oversized"),
        pytest.param(struct.pack(">i", 4) + b"\x00\x12\x00\x03", id="truncated-header"),
        pytest.param(struct.pack(">i", 0), id="empty-frame"),
        pytest.param(
            struct.pack(">i", 12) + struct.pack(">hhi", 1, 12, 9) + b"\xff\xff\xff\xff", id="malformed-fetch"
        ),
        pytest.param(
            struct.pack(">i", 12) + struct.pack(">hhi", 3, 12, 9) + b"\x00\x05ab",
            id="metadata-client-id-past-the-end",
        ),
    ],
)
def test_bad_frame_closes_only_that_connection(
    tiered: Tiered, client: RawClient, neighbours: Neighbours, data: bytes
) -> None:
    before = _errors(tiered)
    client.send(data)
    assert client.closed_by_peer(), "the gateway kept the connection open after bad input"
    assert _errors(tiered) > before, "the protocol error was not counted"
    neighbours.still_served(tiered)


def test_a_frame_cut_short_by_the_client_closing(
    tiered: Tiered, client: RawClient, neighbours: Neighbours
) -> None:
    before = _errors(tiered)
    client.send(struct.pack(">i", 100) + b"\x00\x12\x00\x03")
    client.sock.shutdown(1)  # SHUT_WR: the gateway sees the end of the stream inside the frame
    assert client.closed_by_peer()
    assert _errors(tiered) > before
    neighbours.still_served(tiered)


def test_an_unknown_api_key_gets_an_error_or_a_close(
    tiered: Tiered, client: RawClient, neighbours: Neighbours
) -> None:
    client.handshake()
    client.send(struct.pack(">i", 10) + struct.pack(">hhi", 32000, 0, 5) + b"\x00\x00")
    payload = client.read_payload()
    if payload is not None:  # an answer is only acceptable as an error for exactly this request
        assert correlation_of(payload) == 5
    assert client.closed_by_peer() or payload is not None
    neighbours.still_served(tiered)


def test_a_known_api_at_a_version_the_gateway_does_not_offer_is_refused(
    tiered: Tiered, client: RawClient, neighbours: Neighbours
) -> None:
    client.send(struct.pack(">i", 10) + struct.pack(">hhi", FETCH, 999, 6) + b"\x00\x00")
    payload = client.read_payload()
    if payload is not None:
        assert correlation_of(payload) == 6
    neighbours.still_served(tiered)


def test_a_client_that_disconnects_mid_response(tiered: Tiered, neighbours: Neighbours) -> None:
    """Fetches of the history pipelined, a few bytes of the first answer read, then a reset: the gateway
    writes into a dead socket and must drop only this session."""
    probe = RawClient.at(tiered.gateway.bootstrap)
    probe.handshake()
    partition_leaders, addresses = leaders(probe, tiered.topic)
    probe.close()
    for partition, node in partition_leaders.items():
        c = RawClient.at(addresses[node])
        c.handshake()
        for i in range(8):
            c.send(fetch_frame(tiered.topic, {partition: 0}, 100 + i, partition_max_bytes=1 << 20))
        assert c._exactly(16) is not None
        c.close(reset=True)
    neighbours.still_served(tiered)


def test_a_request_split_at_every_byte_boundary_is_answered_as_when_whole(
    tiered: Tiered, neighbours: Neighbours
) -> None:
    probe = RawClient.at(tiered.gateway.bootstrap)
    probe.handshake()
    partition_leaders, addresses = leaders(probe, tiered.topic)
    probe.close()
    c = RawClient.at(addresses[partition_leaders[0]])
    try:
        c.handshake()
        whole = c.call(
            FETCH, FETCH_VERSION, fetch_frame(tiered.topic, {0: 0}, 1000, partition_max_bytes=4096)
        )
        (reference,) = whole.responses[0].partitions
        assert reference.error_code == 0 and reference.records, "offset 0 is served from the tier"
        data = fetch_frame(tiered.topic, {0: 0}, 1000, partition_max_bytes=4096)
        for cut in range(1, len(data)):
            c.send(data[:cut])
            c.send(data[cut:])
            payload = c.read_payload()
            assert payload is not None, f"closed after a split at byte {cut}"
            assert correlation_of(payload) == 1000
            (part,) = decode_response(FETCH, FETCH_VERSION, payload).responses[0].partitions
            assert (part.error_code, part.records, part.log_start_offset) == (
                0,
                reference.records,
                reference.log_start_offset,
            ), f"split at byte {cut}"
        for i, byte in enumerate(data):  # and one byte per send
            c.send(bytes([byte]))
            del i
        payload = c.read_payload()
        assert payload is not None
        (part,) = decode_response(FETCH, FETCH_VERSION, payload).responses[0].partitions
        assert part.records == reference.records
    finally:
        c.close()
    neighbours.still_served(tiered)


def test_pipelined_requests_are_answered_in_order(tiered: Tiered, neighbours: Neighbours) -> None:
    probe = RawClient.at(tiered.gateway.bootstrap)
    probe.handshake()
    partition_leaders, addresses = leaders(probe, tiered.topic)
    probe.close()
    c = RawClient.at(addresses[partition_leaders[1]])
    try:
        c.handshake()
        plan: list[tuple[int, int, int]] = []  # (correlation id, api, version)
        data = b""
        for i in range(40):
            cid = 5000 + i
            kind = i % 4
            if kind == 0:
                data += fetch_frame(tiered.topic, {1: (i * 7) % 500}, cid, partition_max_bytes=1024)
                plan.append((cid, FETCH, FETCH_VERSION))
            elif kind == 1:
                data += metadata_frame(tiered.topic, cid)
                plan.append((cid, METADATA, 12))
            elif kind == 2:
                data += list_offsets_frame(tiered.topic, 1, -2, cid)
                plan.append((cid, LIST_OFFSETS, 9))
            else:
                data += api_versions_frame(cid)
                plan.append((cid, API_VERSIONS, 3))
        c.send(data)  # all at once: the gateway handles them concurrently, answers in order
        for cid, api, version in plan:
            payload = c.read_payload()
            assert payload is not None, f"closed before answering {cid}"
            assert correlation_of(payload) == cid
            body = decode_response(api, version, payload)
            if api == LIST_OFFSETS:
                assert body.topics[0].partitions[0].offset == 0, "earliest is the tier's start"
            if api == FETCH:
                (part,) = body.responses[0].partitions
                assert part.error_code == 0 and part.records
    finally:
        c.close()
    neighbours.still_served(tiered)


def test_the_neighbour_consumer_ends_with_every_record_once(tiered: Tiered, neighbours: Neighbours) -> None:
    while len(neighbours.got) < RECORDS:
        neighbours.still_served(tiered)
    assert sorted(neighbours.got) == tiered.expected
    assert len({(p, o) for p, o, _, _ in neighbours.got}) == RECORDS
    log = tiered.gateway.log()
    for sign in ("Unhandled exception", "exception was never retrieved", "Error in client_connected"):
        assert sign not in log, f"an exception escaped a session: {sign}"


def test_a_client_that_never_sent_api_versions_is_served_the_history(tiered: Tiered) -> None:
    """ApiVersions is optional in the protocol (a client may use versions it knows); the gateway's own
    requests on the client's connection (high watermark, topic id) must not depend on it."""
    probe = RawClient.at(tiered.gateway.bootstrap)
    partition_leaders, addresses = leaders(probe, tiered.topic)
    probe.close()
    c = RawClient.at(addresses[partition_leaders[2]])
    try:
        body = c.call(FETCH, FETCH_VERSION, fetch_frame(tiered.topic, {2: 0}, 9, partition_max_bytes=4096))
        (part,) = body.responses[0].partitions
        assert part.error_code == 0 and part.records
        assert part.high_watermark > tiered.log_starts[2]
    finally:
        c.close()
