"""What the gateway offers in ApiVersions: the broker's versions, cut to those the codec reads and writes.

A client picks the highest version both sides list, so every request the gateway may need to decode (and
every response it may need to rewrite) is of a version it knows. APIs the codec does not know are not
offered at all, and neither are the share-group APIs and DescribeQuorum, whose responses carry broker or
controller addresses the gateway does not rewrite (addresses.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.index import api_key_map

from storage_core.gateway.protocol import replaced, supported_versions

if TYPE_CHECKING:
    from storage_core.gateway.messages import ApiVersionsResponse

NOT_OFFERED = frozenset(key for key, name in api_key_map.items() if name.startswith("share")) | frozenset(
    key for key, name in api_key_map.items() if name == "describe_quorum"
)


def offered_versions(body: ApiVersionsResponse) -> ApiVersionsResponse:
    """An ApiVersions response body with each API's range cut to what the gateway can read."""
    spans = supported_versions()
    kept = []
    for api in body.api_keys:
        span = spans.get(api.api_key)
        if span is None or api.api_key in NOT_OFFERED:
            continue
        low, high = max(api.min_version, span[0]), min(api.max_version, span[1])
        if low <= high:
            kept.append(replaced(api, min_version=low, max_version=high))
    return replaced(body, api_keys=tuple(kept))


def negotiated(broker_versions: dict[int, tuple[int, int]], api_key: int) -> int | None:
    """The highest version of ``api_key`` both the broker and the codec speak (for the gateway's own
    requests on a client's connection), or None."""
    mine = supported_versions().get(api_key)
    theirs = broker_versions.get(api_key)
    if mine is None or theirs is None:
        return None
    high = min(mine[1], theirs[1])
    return high if high >= max(mine[0], theirs[0]) else None
