"""One client connection's view of the consumer-group APIs: each exchange, already forwarded as it came,
is read for the members it proves (storage_core/gateway/group_members.py), and the connection's members are
dropped when it closes. Reading is off the Fetch path (only the group APIs get here) and can never fail a
client: an exchange that cannot be read is counted and otherwise ignored, its member then looks read
directly, which holds the trim and loses nothing.
"""

from __future__ import annotations

import logging

from storage_core.gateway.group_members import GroupMembers, observe
from storage_core.gateway.protocol import RequestHeader, api_name
from storage_core.gateway_server.metrics import GatewayMetrics

log = logging.getLogger("tierkeeper.gateway")


class GroupWatch:
    def __init__(self, members: GroupMembers, metrics: GatewayMetrics) -> None:
        self._connection = members.open()
        self._metrics = metrics

    def seen(self, header: RequestHeader, payload: bytes, response: bytes) -> None:
        """Record what one request (its payload) and its response say of the group's members."""
        try:
            observations = observe(header, payload, response)
        except Exception as exc:  # noqa: BLE001 - tracking never breaks a client; the member looks direct
            self._metrics.group_requests_unread.labels(api=api_name(header.api_key)).inc()
            log.debug(
                "%s v%d not read for group tracking: %s", api_name(header.api_key), header.api_version, exc
            )
            return
        self._connection.apply(observations)

    def close(self) -> None:
        self._connection.close()
