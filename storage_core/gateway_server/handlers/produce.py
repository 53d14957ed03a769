"""Produce: acks=0 gets no response (none is waited for), and from v10 the NodeEndpoints of partitions
whose leader moved are rewritten; its records are never decoded (storage_core/gateway/protocol.py reads
``acks`` from the bytes before them)."""

from __future__ import annotations

from storage_core.gateway.protocol import Chunks, produce_acks
from storage_core.gateway_server.call import NODE_ENDPOINTS_FROM, Call
from storage_core.gateway_server.handlers.addresses import rewritten
from storage_core.gateway_server.upstream import STREAMED


async def handle(call: Call) -> Chunks | None:
    if produce_acks(call.header, call.payload) == 0:
        call.upstream.send(call.payload, expect_response=False)
        await call.upstream.drain()
        return None
    if call.header.api_version < NODE_ENDPOINTS_FROM:
        return await call.forward()
    response = await call.roundtrip(streamer=call.whole())
    if response is STREAMED:  # passed whole: it named no broker (gateway_server/call.py)
        return []
    return await rewritten(call, response, call.response(response))
