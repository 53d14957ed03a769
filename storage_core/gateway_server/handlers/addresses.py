"""Responses that name brokers (Metadata, FindCoordinator, DescribeCluster; Produce's and Fetch's
NodeEndpoints through their own handlers): every address replaced by the gateway's port for that broker
(storage_core/gateway/addresses.py), and the broker's listener opened before the client hears of it."""

from __future__ import annotations

from kio.static.protocol import ResponsePayload

from storage_core.gateway.addresses import rewrite_addresses
from storage_core.gateway.messages import metadata_response
from storage_core.gateway.protocol import Chunks
from storage_core.gateway_server.call import Call


async def handle(call: Call) -> Chunks:
    response = await call.roundtrip()
    return await rewritten(call, response, call.response(response))


async def metadata(call: Call) -> Chunks:
    """Metadata also teaches the connection's topic ids (ListOffsets and Fetch before v13 name topics
    only; the tier is keyed by id)."""
    response = await call.roundtrip()
    body = metadata_response(call.response(response))
    call.conn.queries.learn_topic_ids(body)
    return await rewritten(call, response, body)


async def rewritten(call: Call, response: bytes, body: ResponsePayload) -> Chunks:
    """The broker's ``response`` (decoded: ``body``) with its broker addresses pointing at the gateway."""
    out = rewrite_addresses(call.header.api_key, body, call.ctx.rule)
    await call.ctx.learned(out.brokers, out.complete)
    if out.body is body:
        return call.passed(response)
    return call.answered(out.body)
