"""Small responses the gateway forwards as they are, written to the client from the broker connection's
reader when it is their turn (gateway_server/call.py ``Call.pass_whole``), against a scripted broker:
such a response is the broker's byte for byte but the correlation id; one naming a broker (Produce v10+
NodeEndpoints, a partition that moved) still reaches the client rewritten; pipelined requests are answered
in order.

The broker is a script on a socket, the gateway runs in the test's own event loop: nothing depends on
timing.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from harness.gateway import free_port_block
from storage_core.gateway.addresses import PortRule
from storage_core.gateway.protocol import (
    RequestHeader,
    decode_response,
    encode_request,
    encode_response,
    request_type,
    response_type,
)

from .rawkafka import FETCH, FETCH_VERSION, fetch_frame
from .scripted_gateway import AnsweringBroker, gateway_in_front

PRODUCE, PRODUCE_VERSION = 0, 10
MOVED_TO = 7
"""The node id a Produce response names as a partition's new leader."""
ADVERTISED = "gateway.example"


def _module(kind: Callable[[int, int], Any], api: int, version: int) -> Any:
    return sys.modules[kind(api, version).__module__]


def _produce_frame(correlation_id: int) -> bytes:
    m = _module(request_type, PRODUCE, PRODUCE_VERSION)
    body = m.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            m.TopicProduceData(
                name="t", partition_data=(m.PartitionProduceData(index=0, records=b"r" * 100),)
            ),
        ),
    )
    header = RequestHeader(PRODUCE, PRODUCE_VERSION, correlation_id, "test", 0)
    return b"".join(bytes(c) for c in encode_request(header, body, correlation_id))


def _produce_answer(correlation_id: int, moved: bool) -> bytes:
    m = _module(response_type, PRODUCE, PRODUCE_VERSION)
    error = ErrorCode.not_leader_or_follower if moved else ErrorCode.none
    partition = m.PartitionProduceResponse(
        index=0,
        error_code=error,
        base_offset=-1 if moved else 41,
        log_append_time=None,
        log_start_offset=0,
        record_errors=(),
        error_message=None,
        current_leader=m.LeaderIdAndEpoch(
            leader_id=MOVED_TO if moved else -1, leader_epoch=3 if moved else -1
        ),
    )
    endpoints = (m.NodeEndpoint(node_id=MOVED_TO, host="10.0.0.7", port=9092, rack=None),) if moved else ()
    body = m.ProduceResponse(
        responses=(m.TopicProduceResponse(name="t", partition_responses=(partition,)),),
        throttle_time=datetime.timedelta(0),
        node_endpoints=endpoints,
    )
    return b"".join(bytes(c) for c in encode_response(PRODUCE, PRODUCE_VERSION, correlation_id, body))[4:]


def _fetch_answer(correlation_id: int) -> bytes:
    m = _module(response_type, FETCH, FETCH_VERSION)
    partition = m.PartitionData(
        partition_index=0,
        error_code=ErrorCode.none,
        high_watermark=3,
        aborted_transactions=None,
        records=b"x" * 900,
    )
    body = m.FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(m.FetchableTopicResponse(topic="t", partitions=(partition,)),),
    )
    return b"".join(bytes(c) for c in encode_response(FETCH, FETCH_VERSION, correlation_id, body))[4:]


async def _exchange(port: int, frames: list[bytes], broker: AnsweringBroker) -> list[bytes]:
    """Send every frame at once on one connection, then let the broker answer; the payloads received."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(frames))
    await writer.drain()
    await asyncio.sleep(0)
    broker.release.set()
    out = []
    for _ in frames:
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 60))
        out.append(await asyncio.wait_for(reader.readexactly(size), 60))
    writer.close()
    return out


def _run(
    tmp_path: Path,
    answer: Callable[[int, int, int], bytes],
    frames: list[bytes],
    rule: PortRule | None = None,
) -> list[bytes]:
    """The payloads a client gets for ``frames`` through a gateway in front of an AnsweringBroker; broker
    N's listener at ``rule``'s port (a real one: the gateway opens it when a response names N)."""

    async def main() -> list[bytes]:
        broker = AnsweringBroker(answer)
        address = await broker.start()
        async with gateway_in_front(address, tmp_path, rule or PortRule(ADVERTISED, 1, 2)) as gateway:
            try:
                return await _exchange(gateway.bound_port(None), frames, broker)
            finally:
                assert broker.server is not None
                broker.server.close()

    return asyncio.run(main())


def _with_id(payload: bytes, correlation_id: int) -> bytes:
    return struct.pack(">i", correlation_id) + payload[4:]


def test_pipelined_produce_and_fetch_answers_are_the_brokers_in_order(tmp_path: Path) -> None:
    def answer(api: int, correlation_id: int, n: int) -> bytes:
        return _produce_answer(correlation_id, False) if api == PRODUCE else _fetch_answer(correlation_id)

    frames = [
        _produce_frame(11),
        fetch_frame("t", {0: 0}, 12),
        _produce_frame(13),
        fetch_frame("t", {0: 1}, 14),
    ]
    got = _run(tmp_path, answer, frames)
    assert [struct.unpack(">i", p[:4])[0] for p in got] == [11, 12, 13, 14]
    assert got[0] == _with_id(_produce_answer(1, False), 11)  # byte for byte, the client's correlation id
    assert got[1] == _with_id(_fetch_answer(1), 12)
    assert got[2] == _with_id(_produce_answer(1, False), 13)
    assert got[3] == _with_id(_fetch_answer(1), 14)


def test_a_produce_answer_naming_a_new_leader_reaches_the_client_rewritten(tmp_path: Path) -> None:
    base = free_port_block(MOVED_TO + 1)
    rule = PortRule(ADVERTISED, base, base)
    frames = [_produce_frame(21), _produce_frame(22)]
    got = _run(tmp_path, lambda api, cid, n: _produce_answer(cid, n == 0), frames, rule)
    moved = decode_response(PRODUCE, PRODUCE_VERSION, got[0])
    (endpoint,) = moved.node_endpoints
    assert (endpoint.node_id, endpoint.host, endpoint.port) == (MOVED_TO, ADVERTISED, base + MOVED_TO)
    assert moved.responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
    assert got[1] == _with_id(_produce_answer(1, False), 22)
