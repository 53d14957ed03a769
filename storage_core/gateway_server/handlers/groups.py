"""The consumer-group APIs (JoinGroup, SyncGroup, Heartbeat, OffsetCommit, LeaveGroup, ConsumerGroupHeartbeat,
ShareGroupHeartbeat): forwarded and answered as they came, then read for the members this connection
carries (gateway_server/group_watch.py), so the trim knows which groups read through a gateway (issue 45).

Not :func:`~storage_core.gateway_server.call.observing`: that entry decodes with the codec and drops what
it cannot read, while an exchange the tracking cannot read must be counted and make its member look read
directly (which holds the trim: the safe side). Versions the codec lacks come here too, and pass as well.
"""

from __future__ import annotations

from storage_core.gateway.protocol import Chunks
from storage_core.gateway_server.call import Call


async def handle(call: Call) -> Chunks:
    response = await call.roundtrip()
    if call.conn.groups is not None:
        call.conn.groups.seen(call.header, call.payload, response)
    return call.passed(response)
