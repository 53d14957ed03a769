"""The decoded messages the gateway reads, typed as the codec makes them: for each API it reads, the union of
kio's classes of every version the codec reads (:func:`storage_core.gateway.protocol.supported_versions`;
tests/gateway/test_gateway_rooms.py checks the unions cover exactly those). mypy then checks a field read on
every version: one a version lacks (Fetch's topic names from v13, its session id before v7) must be read
with ``getattr`` and a default, as Kafka's own compatibility rules require.

kio's entities of different versions are different classes with different field types, so a changed copy
is made with :func:`storage_core.gateway.protocol.replaced` (which leaves out fields a version lacks), not
``dataclasses.replace``, which mypy cannot check across a union.

The unions exist for the type checker only: importing every version's module would cost the gateway memory
for versions no client uses (kio loads a version's module when a message of it is first read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar, cast

from kio.static.constants import EntityType
from kio.static.protocol import Payload

from storage_core.gateway.protocol import ApiKey, ProtocolError

_M = TypeVar("_M")

if TYPE_CHECKING:
    from kio.schema.api_versions.v0 import response as _api_versions_v0_res
    from kio.schema.api_versions.v1 import response as _api_versions_v1_res
    from kio.schema.api_versions.v2 import response as _api_versions_v2_res
    from kio.schema.api_versions.v3 import response as _api_versions_v3_res
    from kio.schema.api_versions.v4 import response as _api_versions_v4_res
    from kio.schema.describe_cluster.v0 import response as _describe_cluster_v0_res
    from kio.schema.describe_cluster.v1 import response as _describe_cluster_v1_res
    from kio.schema.describe_cluster.v2 import response as _describe_cluster_v2_res
    from kio.schema.fetch.v4 import request as _fetch_v4_req
    from kio.schema.fetch.v4 import response as _fetch_v4_res
    from kio.schema.fetch.v5 import request as _fetch_v5_req
    from kio.schema.fetch.v5 import response as _fetch_v5_res
    from kio.schema.fetch.v6 import request as _fetch_v6_req
    from kio.schema.fetch.v6 import response as _fetch_v6_res
    from kio.schema.fetch.v7 import request as _fetch_v7_req
    from kio.schema.fetch.v7 import response as _fetch_v7_res
    from kio.schema.fetch.v8 import request as _fetch_v8_req
    from kio.schema.fetch.v8 import response as _fetch_v8_res
    from kio.schema.fetch.v9 import request as _fetch_v9_req
    from kio.schema.fetch.v9 import response as _fetch_v9_res
    from kio.schema.fetch.v10 import request as _fetch_v10_req
    from kio.schema.fetch.v10 import response as _fetch_v10_res
    from kio.schema.fetch.v11 import request as _fetch_v11_req
    from kio.schema.fetch.v11 import response as _fetch_v11_res
    from kio.schema.fetch.v12 import request as _fetch_v12_req
    from kio.schema.fetch.v12 import response as _fetch_v12_res
    from kio.schema.fetch.v13 import request as _fetch_v13_req
    from kio.schema.fetch.v13 import response as _fetch_v13_res
    from kio.schema.fetch.v14 import request as _fetch_v14_req
    from kio.schema.fetch.v14 import response as _fetch_v14_res
    from kio.schema.fetch.v15 import request as _fetch_v15_req
    from kio.schema.fetch.v15 import response as _fetch_v15_res
    from kio.schema.fetch.v16 import request as _fetch_v16_req
    from kio.schema.fetch.v16 import response as _fetch_v16_res
    from kio.schema.fetch.v17 import request as _fetch_v17_req
    from kio.schema.fetch.v17 import response as _fetch_v17_res
    from kio.schema.fetch.v18 import request as _fetch_v18_req
    from kio.schema.fetch.v18 import response as _fetch_v18_res
    from kio.schema.list_offsets.v1 import request as _list_offsets_v1_req
    from kio.schema.list_offsets.v1 import response as _list_offsets_v1_res
    from kio.schema.list_offsets.v2 import request as _list_offsets_v2_req
    from kio.schema.list_offsets.v2 import response as _list_offsets_v2_res
    from kio.schema.list_offsets.v3 import request as _list_offsets_v3_req
    from kio.schema.list_offsets.v3 import response as _list_offsets_v3_res
    from kio.schema.list_offsets.v4 import request as _list_offsets_v4_req
    from kio.schema.list_offsets.v4 import response as _list_offsets_v4_res
    from kio.schema.list_offsets.v5 import request as _list_offsets_v5_req
    from kio.schema.list_offsets.v5 import response as _list_offsets_v5_res
    from kio.schema.list_offsets.v6 import request as _list_offsets_v6_req
    from kio.schema.list_offsets.v6 import response as _list_offsets_v6_res
    from kio.schema.list_offsets.v7 import request as _list_offsets_v7_req
    from kio.schema.list_offsets.v7 import response as _list_offsets_v7_res
    from kio.schema.list_offsets.v8 import request as _list_offsets_v8_req
    from kio.schema.list_offsets.v8 import response as _list_offsets_v8_res
    from kio.schema.list_offsets.v9 import request as _list_offsets_v9_req
    from kio.schema.list_offsets.v9 import response as _list_offsets_v9_res
    from kio.schema.list_offsets.v10 import request as _list_offsets_v10_req
    from kio.schema.list_offsets.v10 import response as _list_offsets_v10_res
    from kio.schema.list_offsets.v11 import request as _list_offsets_v11_req
    from kio.schema.list_offsets.v11 import response as _list_offsets_v11_res
    from kio.schema.metadata.v0 import response as _metadata_v0_res
    from kio.schema.metadata.v1 import response as _metadata_v1_res
    from kio.schema.metadata.v2 import response as _metadata_v2_res
    from kio.schema.metadata.v3 import response as _metadata_v3_res
    from kio.schema.metadata.v4 import response as _metadata_v4_res
    from kio.schema.metadata.v5 import response as _metadata_v5_res
    from kio.schema.metadata.v6 import response as _metadata_v6_res
    from kio.schema.metadata.v7 import response as _metadata_v7_res
    from kio.schema.metadata.v8 import response as _metadata_v8_res
    from kio.schema.metadata.v9 import response as _metadata_v9_res
    from kio.schema.metadata.v10 import response as _metadata_v10_res
    from kio.schema.metadata.v11 import response as _metadata_v11_res
    from kio.schema.metadata.v12 import response as _metadata_v12_res
    from kio.schema.metadata.v13 import response as _metadata_v13_res

    FetchRequest: TypeAlias = (
        _fetch_v4_req.FetchRequest
        | _fetch_v5_req.FetchRequest
        | _fetch_v6_req.FetchRequest
        | _fetch_v7_req.FetchRequest
        | _fetch_v8_req.FetchRequest
        | _fetch_v9_req.FetchRequest
        | _fetch_v10_req.FetchRequest
        | _fetch_v11_req.FetchRequest
        | _fetch_v12_req.FetchRequest
        | _fetch_v13_req.FetchRequest
        | _fetch_v14_req.FetchRequest
        | _fetch_v15_req.FetchRequest
        | _fetch_v16_req.FetchRequest
        | _fetch_v17_req.FetchRequest
        | _fetch_v18_req.FetchRequest
    )
    """Fetch requests of every version the codec reads."""

    FetchResponse: TypeAlias = (
        _fetch_v4_res.FetchResponse
        | _fetch_v5_res.FetchResponse
        | _fetch_v6_res.FetchResponse
        | _fetch_v7_res.FetchResponse
        | _fetch_v8_res.FetchResponse
        | _fetch_v9_res.FetchResponse
        | _fetch_v10_res.FetchResponse
        | _fetch_v11_res.FetchResponse
        | _fetch_v12_res.FetchResponse
        | _fetch_v13_res.FetchResponse
        | _fetch_v14_res.FetchResponse
        | _fetch_v15_res.FetchResponse
        | _fetch_v16_res.FetchResponse
        | _fetch_v17_res.FetchResponse
        | _fetch_v18_res.FetchResponse
    )
    """Fetch responses of every version the codec reads."""

    ListOffsetsRequest: TypeAlias = (
        _list_offsets_v1_req.ListOffsetsRequest
        | _list_offsets_v2_req.ListOffsetsRequest
        | _list_offsets_v3_req.ListOffsetsRequest
        | _list_offsets_v4_req.ListOffsetsRequest
        | _list_offsets_v5_req.ListOffsetsRequest
        | _list_offsets_v6_req.ListOffsetsRequest
        | _list_offsets_v7_req.ListOffsetsRequest
        | _list_offsets_v8_req.ListOffsetsRequest
        | _list_offsets_v9_req.ListOffsetsRequest
        | _list_offsets_v10_req.ListOffsetsRequest
        | _list_offsets_v11_req.ListOffsetsRequest
    )
    """ListOffsets requests of every version the codec reads."""

    ListOffsetsResponse: TypeAlias = (
        _list_offsets_v1_res.ListOffsetsResponse
        | _list_offsets_v2_res.ListOffsetsResponse
        | _list_offsets_v3_res.ListOffsetsResponse
        | _list_offsets_v4_res.ListOffsetsResponse
        | _list_offsets_v5_res.ListOffsetsResponse
        | _list_offsets_v6_res.ListOffsetsResponse
        | _list_offsets_v7_res.ListOffsetsResponse
        | _list_offsets_v8_res.ListOffsetsResponse
        | _list_offsets_v9_res.ListOffsetsResponse
        | _list_offsets_v10_res.ListOffsetsResponse
        | _list_offsets_v11_res.ListOffsetsResponse
    )
    """ListOffsets responses of every version the codec reads."""

    MetadataResponse: TypeAlias = (
        _metadata_v0_res.MetadataResponse
        | _metadata_v1_res.MetadataResponse
        | _metadata_v2_res.MetadataResponse
        | _metadata_v3_res.MetadataResponse
        | _metadata_v4_res.MetadataResponse
        | _metadata_v5_res.MetadataResponse
        | _metadata_v6_res.MetadataResponse
        | _metadata_v7_res.MetadataResponse
        | _metadata_v8_res.MetadataResponse
        | _metadata_v9_res.MetadataResponse
        | _metadata_v10_res.MetadataResponse
        | _metadata_v11_res.MetadataResponse
        | _metadata_v12_res.MetadataResponse
        | _metadata_v13_res.MetadataResponse
    )
    """Metadata responses of every version the codec reads."""

    ApiVersionsResponse: TypeAlias = (
        _api_versions_v0_res.ApiVersionsResponse
        | _api_versions_v1_res.ApiVersionsResponse
        | _api_versions_v2_res.ApiVersionsResponse
        | _api_versions_v3_res.ApiVersionsResponse
        | _api_versions_v4_res.ApiVersionsResponse
    )
    """ApiVersions responses of every version the codec reads."""

    DescribeClusterResponse: TypeAlias = (
        _describe_cluster_v0_res.DescribeClusterResponse
        | _describe_cluster_v1_res.DescribeClusterResponse
        | _describe_cluster_v2_res.DescribeClusterResponse
    )
    """DescribeCluster responses of every version the codec reads."""


class _Narrowing(Generic[_M]):
    """A decoded message as one of the unions above: the body itself when it is a message of this API in
    this direction, else a :class:`ProtocolError` (another API's message reaching a handler would be the
    gateway's bug, never the client's bytes)."""

    def __init__(self, api: ApiKey, kind: EntityType) -> None:
        self.api, self.kind = api, kind

    def __call__(self, body: Payload) -> _M:
        if int(body.__api_key__) != self.api or body.__type__ != self.kind:
            raise ProtocolError(f"expected a {self.api.name} {self.kind.name}, got {type(body).__name__}")
        return cast(_M, body)


fetch_request: _Narrowing[FetchRequest] = _Narrowing(ApiKey.FETCH, EntityType.request)
fetch_response: _Narrowing[FetchResponse] = _Narrowing(ApiKey.FETCH, EntityType.response)
list_offsets_request: _Narrowing[ListOffsetsRequest] = _Narrowing(ApiKey.LIST_OFFSETS, EntityType.request)
list_offsets_response: _Narrowing[ListOffsetsResponse] = _Narrowing(ApiKey.LIST_OFFSETS, EntityType.response)
metadata_response: _Narrowing[MetadataResponse] = _Narrowing(ApiKey.METADATA, EntityType.response)
api_versions_response: _Narrowing[ApiVersionsResponse] = _Narrowing(ApiKey.API_VERSIONS, EntityType.response)
describe_cluster_response: _Narrowing[DescribeClusterResponse] = _Narrowing(
    ApiKey.DESCRIBE_CLUSTER, EntityType.response
)
