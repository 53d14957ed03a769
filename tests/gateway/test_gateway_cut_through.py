"""Cut-through of large Fetch responses, against a scripted broker: a response streamed to the client as it
arrives is the broker's response, byte for byte but the correlation id; one the broker stops sending
half-way leaves the client a frame shorter than its size and a closed connection, never a whole-looking
answer; the gateway and its other clients go on.

The broker here is a script on a socket (a real broker cannot be made to die at a chosen byte): it answers
each Fetch with a one-partition response of 1 MiB of records, whole or cut after ``cut`` bytes. The
gateway runs in the test's own event loop, so nothing depends on timing.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kio.schema.errors import ErrorCode

from storage_core.adapters.store import RemoteStore
from storage_core.gateway.addresses import Address, PortRule
from storage_core.gateway.block_cache import BlockCache
from storage_core.gateway.history import TierHistory
from storage_core.gateway.protocol import decode_response, encode_response, read_request_header, response_type
from storage_core.gateway_server.context import GatewayContext
from storage_core.gateway_server.metrics import GatewayMetrics
from storage_core.gateway_server.server import Gateway, Listen

from .rawkafka import FETCH, FETCH_VERSION, fetch_frame

RECORDS = bytes(range(251)) * (4 << 12)  # ~1 MiB, not a multiple of any chunk size


def _response_payload(correlation_id: int) -> bytes:
    m = sys.modules[response_type(FETCH, FETCH_VERSION).__module__]
    body = m.FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(
            m.FetchableTopicResponse(
                topic="t",
                partitions=(
                    m.PartitionData(
                        partition_index=0,
                        error_code=ErrorCode.none,
                        high_watermark=10**6,
                        aborted_transactions=None,
                        records=RECORDS,
                    ),
                ),
            ),
        ),
    )
    frame = b"".join(bytes(c) for c in encode_response(FETCH, FETCH_VERSION, correlation_id, body))
    return frame[4:]


class ScriptedBroker:
    """Answers every Fetch of connection ``i`` whole, or cut after ``cuts[i]`` bytes and closed."""

    def __init__(self, cuts: list[int | None]) -> None:
        self.cuts = cuts
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> Address:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return Address("127.0.0.1", self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cut = self.cuts[self.connections]
        self.connections += 1
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                header = read_request_header(await reader.readexactly(size))
                assert header.api_key == FETCH, header
                payload = _response_payload(header.correlation_id)
                frame = struct.pack(">i", len(payload)) + payload
                writer.write(frame if cut is None else frame[:cut])
                await writer.drain()
                if cut is not None:
                    writer.transport.abort()  # the broker dies mid-response
                    return
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


async def _client_read(port: int, correlation_id: int) -> tuple[int | None, bytes, bool]:
    """(the frame size the client was told, the bytes it got of the frame, whether the gateway then closed)"""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(fetch_frame("t", {0: 0}, correlation_id))
    await writer.drain()
    got = await reader.read(4)
    size = struct.unpack(">i", got)[0] if len(got) == 4 else None
    body = bytearray()
    while True:
        chunk = await asyncio.wait_for(reader.read(1 << 20), 60)
        if not chunk:
            closed = True
            break
        body += chunk
        if size is not None and len(body) >= size:
            closed = False
            break
    writer.close()
    return size, bytes(body), closed


def test_a_streamed_response_is_the_brokers_and_one_cut_by_the_broker_is_never_whole(tmp_path: Path) -> None:
    async def main() -> None:
        whole = len(_response_payload(1)) + 4
        broker = ScriptedBroker([None, whole // 2, 200, None])
        address = await broker.start()
        pool = ThreadPoolExecutor(2)
        store = RemoteStore(f"file://{tmp_path / 'tier'}", {})
        metrics = GatewayMetrics()
        ctx = GatewayContext(
            rule=PortRule("127.0.0.1", 1, 2),
            bootstrap=[address],
            history=TierHistory(store, BlockCache(store.get_range, pool)),
            tier_pool=pool,
            metrics=metrics,
        )
        gateway = Gateway(ctx, Listen("127.0.0.1", 0))
        await gateway.start()
        port = gateway.bound_port(None)
        try:
            # Whole: streamed, and exactly the broker's response under the client's correlation id.
            size, body, closed = await _client_read(port, 7)
            assert not closed and size == len(body) == whole - 4
            decoded = decode_response(FETCH, FETCH_VERSION, body)
            assert struct.unpack(">i", body[:4])[0] == 7
            assert decoded.responses[0].partitions[0].records == RECORDS
            assert body == struct.pack(">i", 7) + _response_payload(7)[4:]
            assert metrics.streamed_responses._value.get() == 1
            # Cut in the records (streamed): the client was promised the whole size, gets less, then a close.
            size, body, closed = await _client_read(port, 8)
            assert closed and size == whole - 4 and len(body) < size
            # Cut in the headers (before the gateway could decide): a close, without a frame at all.
            size, body, closed = await _client_read(port, 9)
            assert closed and (size is None or len(body) < size)
            # The gateway goes on: the next client is answered whole.
            size, body, closed = await _client_read(port, 10)
            assert not closed and size == len(body) == whole - 4
            assert metrics.streamed_responses._value.get() == 2
        finally:
            await gateway.stop()
            assert broker.server is not None
            broker.server.close()
            pool.shutdown()

    asyncio.run(main())
