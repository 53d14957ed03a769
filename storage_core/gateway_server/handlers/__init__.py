"""The handler table: each API the gateway intercepts, and the one module it is handled in. Frames of an API
not in :data:`HANDLERS` are forwarded without being decoded (their correlation id patched), and so are
frames of a version the codec does not know, unless its entry says otherwise (ApiVersions: KIP-511).

A handler is an ``async`` function of a :class:`~storage_core.gateway_server.call.Call` (the request's
header and bytes, its broker connection, what its client connection's handlers share) returning the frame
for the client, or None for no response. It is called once the broker connection is open, concurrently
with the connection's other requests; the session writes the answers in request order.

Adding an *observing* handler (the request and the response pass unchanged, the gateway only looks) is one
entry::

    ApiKey.JOIN_GROUP: observing(groups.joined),

where ``groups.joined`` is ``async def joined(call: Call, request: RequestPayload, response:
ResponsePayload) -> None`` in a module of its own beside these (decoded messages narrowed with
storage_core/gateway/messages.py; anything slow or blocking on ``call.ctx.run_tier``). A failing observer
is logged and the client answered all the same. An API that changes what the client gets has a module
here with a ``handle(call)`` and an entry ``ApiKey.X: Route(x.handle)``; an API whose response names
brokers must have one (storage_core/gateway/addresses.py), or a client would learn an address behind
the gateway.
"""

from __future__ import annotations

from collections.abc import Mapping

from storage_core.gateway.group_members import GROUP_APIS
from storage_core.gateway.protocol import ApiKey
from storage_core.gateway_server.call import Route
from storage_core.gateway_server.handlers import addresses, api_versions, fetch, groups, list_offsets, produce

HANDLERS: Mapping[int, Route] = {
    ApiKey.PRODUCE: Route(produce.handle),
    ApiKey.FETCH: Route(fetch.handle),
    ApiKey.LIST_OFFSETS: Route(list_offsets.handle),
    ApiKey.METADATA: Route(addresses.metadata),
    ApiKey.FIND_COORDINATOR: Route(addresses.handle),
    ApiKey.DESCRIBE_CLUSTER: Route(addresses.handle),
    ApiKey.API_VERSIONS: Route(api_versions.handle, unknown_version=api_versions.unsupported),
    **{api: Route(groups.handle, unknown_version=groups.handle) for api in GROUP_APIS},
}
"""By API key (frames carry plain ints; :class:`ApiKey` members are ints)."""

INTERCEPTED = frozenset(HANDLERS)
