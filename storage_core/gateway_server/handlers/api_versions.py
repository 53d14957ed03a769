"""ApiVersions: the broker's versions cut to those the codec reads and writes (storage_core/gateway/
versions.py), so every request the gateway may have to decode is of a version it knows; the broker's own
list is kept for the gateway's questions on this connection (gateway_server/broker_queries.py)."""

from __future__ import annotations

from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from storage_core.gateway.messages import api_versions_response
from storage_core.gateway.protocol import ApiKey, Chunks, encode_response, supported_versions
from storage_core.gateway.versions import offered_versions
from storage_core.gateway_server.call import Call


async def handle(call: Call) -> Chunks:
    body = api_versions_response(call.response(await call.roundtrip()))
    if body.error_code == ErrorCode.none:
        call.upstream.broker_versions = {a.api_key: (a.min_version, a.max_version) for a in body.api_keys}
    return call.answered(offered_versions(body))


async def unsupported(call: Call) -> Chunks:
    """ApiVersions of a version the gateway cannot read: KIP-511's answer (v0, UNSUPPORTED_VERSION and
    the versions of ApiVersions it does know), so the client asks again in one of those."""
    low, high = supported_versions()[ApiKey.API_VERSIONS]
    body = ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersion(api_key=i16(ApiKey.API_VERSIONS), min_version=i16(low), max_version=i16(high)),),
    )
    return encode_response(ApiKey.API_VERSIONS, 0, call.header.correlation_id, body)
