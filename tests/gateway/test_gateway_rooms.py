"""The gateway's rooms: API keys named once and as Kafka names them, one way to build a request of any
version, typed message unions that cover what the codec reads, a handler table every broker-naming API
is in, and an observing entry that passes the broker's bytes unchanged while it looks (against a scripted
broker on a socket, the gateway in the test's own event loop)."""

from __future__ import annotations

import ast
import asyncio
import datetime
import struct
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.static.protocol import RequestPayload, ResponsePayload

import storage_core.gateway.messages
from storage_core.gateway.addresses import ADDRESS_APIS, PortRule
from storage_core.gateway.protocol import (
    ApiKey,
    RequestHeader,
    build_request,
    build_response,
    decode_request,
    encode_request,
    encode_response,
    read_request_header,
    supported_versions,
)
from storage_core.gateway_server import handlers
from storage_core.gateway_server.call import Call, observing

from .scripted_gateway import AnsweringBroker, gateway_in_front

HEARTBEAT_VERSION = 4


def test_every_api_key_is_named_as_kafka_names_it() -> None:
    for api in ApiKey:
        assert api_key_map[api] == api.name.lower(), api


def test_the_message_unions_cover_every_version_the_codec_reads() -> None:
    """storage_core/gateway/messages.py imports each version's module for the type checker only: its
    imports, read from the source, must be exactly the versions the codec reads of each API named."""
    tree = ast.parse(Path(storage_core.gateway.messages.__file__).read_text())
    imported: dict[tuple[str, str], set[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kio.schema."):
            _, _, api, version = (node.module or "").split(".")
            for alias in node.names:
                imported.setdefault((api, alias.name), set()).add(int(version[1:]))
    assert imported, "no kio message module imported"
    by_name = {name: key for key, name in api_key_map.items()}
    for (api, direction), versions in imported.items():
        low, high = supported_versions()[by_name[api]]
        assert versions == set(range(low, high + 1)), (api, direction)


def test_a_request_is_built_from_mappings_for_any_version_leaving_out_what_a_version_lacks() -> None:
    topics = [
        {"name": "t", "partitions": [{"partition_index": 3, "timestamp": -2, "current_leader_epoch": 7}]}
    ]
    for version in (1, 9):
        body = build_request(
            ApiKey.LIST_OFFSETS,
            version,
            replica_id=-1,
            isolation_level=1,
            topics=topics,
            timeout=datetime.timedelta(seconds=30),
        )
        header = RequestHeader(ApiKey.LIST_OFFSETS, version, 5, "test", 0)
        payload = b"".join(bytes(c) for c in encode_request(header, body, 5))[4:]
        decoded = decode_request(read_request_header(payload), payload)
        assert decoded == body
        partition = body.topics[0].partitions[0]  # type: ignore[attr-defined]
        assert (partition.partition_index, partition.timestamp) == (3, -2)
        # v1 has neither an isolation level nor a leader epoch; v9 has both.
        assert getattr(body, "isolation_level", None) == (None if version == 1 else 1)
        assert getattr(partition, "current_leader_epoch", None) == (None if version == 1 else 7)


def test_every_api_whose_response_names_brokers_has_a_handler() -> None:
    """A response naming brokers that went through unhandled would tell a client an address behind the
    gateway."""
    assert ADDRESS_APIS <= handlers.INTERCEPTED


def _heartbeat_response(correlation_id: int) -> bytes:
    body = build_response(
        ApiKey.HEARTBEAT, HEARTBEAT_VERSION, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none
    )
    frame = b"".join(
        bytes(c) for c in encode_response(ApiKey.HEARTBEAT, HEARTBEAT_VERSION, correlation_id, body)
    )
    return frame[4:]


def _heartbeat_answer(api: int, correlation_id: int, n: int) -> bytes:
    """Every request a Heartbeat, answered with the same response."""
    assert api == ApiKey.HEARTBEAT, api
    return _heartbeat_response(correlation_id)


def _heartbeat_frame(correlation_id: int) -> bytes:
    body = build_request(
        ApiKey.HEARTBEAT,
        HEARTBEAT_VERSION,
        group_id="g",
        generation_id=3,
        member_id="m",
        group_instance_id=None,
    )
    header = RequestHeader(ApiKey.HEARTBEAT, HEARTBEAT_VERSION, correlation_id, "test", 0)
    return b"".join(bytes(c) for c in encode_request(header, body, correlation_id))


async def _ask(port: int, correlation_ids: list[int]) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = []
    for correlation_id in correlation_ids:
        writer.write(_heartbeat_frame(correlation_id))
        await writer.drain()
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 60))
        answers.append(await asyncio.wait_for(reader.readexactly(size), 60))
    writer.close()
    return answers


def test_an_observing_entry_passes_the_brokers_bytes_and_sees_both_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[RequestPayload, ResponsePayload]] = []

    async def watch(call: Call, request: RequestPayload, response: ResponsePayload) -> None:
        seen.append((request, response))
        if len(seen) == 2:
            raise RuntimeError("an observer's own failure")

    monkeypatch.setitem(handlers.HANDLERS, ApiKey.HEARTBEAT, observing(watch))

    async def main() -> list[bytes]:
        broker = AnsweringBroker(_heartbeat_answer)
        broker.release.set()
        address = await broker.start()
        async with gateway_in_front(address, tmp_path, PortRule("127.0.0.1", 1, 2)) as gateway:
            try:
                return await _ask(gateway.bound_port(None), [11, 12, 13])
            finally:
                assert broker.server is not None
                broker.server.close()

    answers = asyncio.run(main())
    # The broker's bytes under the client's correlation id, the failing observer's call included.
    assert answers == [_heartbeat_response(c) for c in (11, 12, 13)]
    assert len(seen) == 3
    for request, response in seen:
        assert (getattr(request, "group_id"), getattr(request, "generation_id")) == ("g", 3)  # noqa: B009
        assert int(response.__api_key__) == ApiKey.HEARTBEAT
