"""Which consumer-group members a gateway carries, read from the group APIs on its client connections
(pure: decoding and bookkeeping, no I/O). What the gateway publishes of it is group_sightings.py's record.

A member counts as carried once the broker has accepted it on that connection: a JoinGroup answered
without error (its member id is in the response), a SyncGroup or Heartbeat the coordinator accepted (or
answered REBALANCE_IN_PROGRESS, which it says only to a member), an OffsetCommit of a member whose every
partition was committed, a ConsumerGroupHeartbeat or ShareGroupHeartbeat answered without error. What a
client merely claims is not enough: a client that sends another member's id, or one the group does not
know, would otherwise make a direct reader look carried and release its trim hold.

A member stops being carried when it leaves (LeaveGroup, a heartbeat with member epoch -1 or -2), when
the coordinator says it is not a member any more (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
FENCED_MEMBER_EPOCH), and when its connection closes. Every mistake here errs on the side of "not
carried": the group then looks read directly and holds the trim, which costs disk, never records.

One connection carries one member per group (a Kafka client is one member of a group; a new member id
on the same connection, after it was fenced and rejoined, replaces the old one), so what a connection
can make the gateway hold is bounded by the groups it names, and those by ``MAX_GROUPS_PER_CONNECTION``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.gateway.group_sightings import GroupProtocol
from storage_core.gateway.protocol import ApiKey, RequestHeader, decode_request, decode_response, knows

OFFSET_COMMIT, JOIN_GROUP, HEARTBEAT = ApiKey.OFFSET_COMMIT, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT
LEAVE_GROUP, SYNC_GROUP = ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP
CONSUMER_GROUP_HEARTBEAT, SHARE_GROUP_HEARTBEAT = (
    ApiKey.CONSUMER_GROUP_HEARTBEAT,
    ApiKey.SHARE_GROUP_HEARTBEAT,
)
GROUP_APIS = frozenset(
    {
        OFFSET_COMMIT,
        JOIN_GROUP,
        HEARTBEAT,
        LEAVE_GROUP,
        SYNC_GROUP,
        CONSUMER_GROUP_HEARTBEAT,
        SHARE_GROUP_HEARTBEAT,
    }
)
"""The APIs whose requests and responses are observed (decoded after being forwarded as they came)."""

MAX_GROUPS_PER_CONNECTION = 64
"""Groups one connection may make the gateway carry; the ones past it are not recorded (they look read
directly and hold the trim). A consumer is in one group; 64 covers clients that commit for many."""
MAX_GROUPS = 10_000
"""Groups one gateway carries at most (each is one record every REPUBLISH_MS)."""

_PROTOCOL: dict[int, GroupProtocol] = {
    JOIN_GROUP: "classic",
    SYNC_GROUP: "classic",
    HEARTBEAT: "classic",
    CONSUMER_GROUP_HEARTBEAT: "consumer",
    SHARE_GROUP_HEARTBEAT: "share",
}
_ACCEPTED = frozenset({ErrorCode.none, ErrorCode.rebalance_in_progress})
"""Answers a coordinator gives only to a member of the group (a rebalance is announced to members)."""
_NOT_A_MEMBER = frozenset(
    {ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id, ErrorCode.fenced_member_epoch}
)
_LEAVE_EPOCHS = frozenset({-1, -2})
"""A ConsumerGroupHeartbeat's member epoch -1: the member leaves; -2: a static member leaves for now."""


@dataclass(frozen=True, slots=True)
class Member:
    """A member the broker accepted on one connection."""

    group: str
    member_id: str
    instance_id: str | None
    protocol: GroupProtocol | None
    """None: an OffsetCommit, which does not say (the group's other sightings do)."""

    @property
    def ids(self) -> frozenset[str]:
        """What Kafka may describe it by: its member id and, for a static member, its group.instance.id."""
        return frozenset(i for i in (self.member_id, self.instance_id) if i)


@dataclass(frozen=True, slots=True)
class Gone:
    """Members that are no longer in ``group``: the ones named (by member id or instance id) or, with
    ``ids`` None, the one this connection carried."""

    group: str
    ids: frozenset[str] | None = None


Observation = Member | Gone


def observe(header: RequestHeader, payload: bytes, response: bytes) -> list[Observation]:
    """What one exchange of a group API says about its members (``payload``: the request after the
    frame size; ``response``: the response payload). Raises ProtocolError for bytes the codec cannot read
    (the caller has passed them through already); an API or version the codec lacks says nothing."""
    api, version = header.api_key, header.api_version
    if api not in GROUP_APIS or not knows(api, version):
        return []
    # Any: the group APIs are read by field name across all their versions (kio has a class per version;
    # a field a version lacks is asked for with getattr).
    request: Any = decode_request(header, payload)
    if api == LEAVE_GROUP:
        members = getattr(request, "members", None)
        if members is None:  # v0-2: one member, by id
            return [Gone(request.group_id, frozenset({request.member_id}))]
        return [
            Gone(
                request.group_id,
                frozenset(i for m in members for i in (m.member_id, m.group_instance_id) if i),
            )
        ]
    if api in (CONSUMER_GROUP_HEARTBEAT, SHARE_GROUP_HEARTBEAT) and request.member_epoch in _LEAVE_EPOCHS:
        return [Gone(request.group_id, frozenset({request.member_id}))]
    body: Any = decode_response(api, version, response)
    if api == OFFSET_COMMIT:
        return _committed(request, body)
    error = body.error_code
    if error in _NOT_A_MEMBER:
        return [Gone(request.group_id)]
    if api == JOIN_GROUP:
        # The response's member id: the first JoinGroup of a member has none of its own yet.
        if error != ErrorCode.none or not body.member_id:
            return []
        return [Member(request.group_id, body.member_id, _instance(request), "classic")]
    if api in (SYNC_GROUP, HEARTBEAT):
        if error not in _ACCEPTED or not request.member_id:
            return []
        return [Member(request.group_id, request.member_id, _instance(request), _PROTOCOL[api])]
    # ConsumerGroupHeartbeat, ShareGroupHeartbeat: v0 of the former gets its member id from the
    # coordinator, later versions send the one the client made; the instance id is sent when it changes.
    member_id = body.member_id or request.member_id
    if error != ErrorCode.none or not member_id:
        return []
    return [Member(request.group_id, member_id, getattr(request, "instance_id", None), _PROTOCOL[api])]


def _instance(request: Any) -> str | None:
    return getattr(request, "group_instance_id", None) or None


def _committed(request: Any, body: Any) -> list[Observation]:
    """An OffsetCommit proves membership only when it names a member and every partition was committed
    (a commit of a member the group does not know fails with UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION)."""
    member_id = getattr(request, "member_id", "")
    if not member_id:
        return []  # a commit of a consumer outside the group protocol (assign() and commit, admin tools)
    errors = {p.error_code for t in body.topics for p in t.partitions}
    if errors & _NOT_A_MEMBER:
        return [Gone(request.group_id)]
    if not errors or errors != {ErrorCode.none}:
        return []
    return [Member(request.group_id, member_id, _instance(request), None)]


@dataclass(frozen=True, slots=True)
class Carried:
    """One group as one gateway carries it now, over all its connections."""

    protocol: GroupProtocol
    members: frozenset[str]


class GroupMembers:
    """The members every client connection of one gateway carries (``open()`` one per connection).

    ``on_change`` is called when what :meth:`carried` returns may have changed (the publisher wakes)."""

    def __init__(
        self,
        on_change: Callable[[], None] | None = None,
        *,
        max_groups: int = MAX_GROUPS,
        max_groups_per_connection: int = MAX_GROUPS_PER_CONNECTION,
    ) -> None:
        self._max_groups = max_groups
        self._max_per_connection = max_groups_per_connection
        self._connections: dict[int, dict[str, Member]] = {}
        self._holders: dict[str, int] = {}
        """Group -> how many connections carry a member of it (for MAX_GROUPS without a scan)."""
        self._next = 0
        self.on_change = on_change
        self.dropped = 0
        """Members not recorded because a bound was reached (they look read directly)."""

    def open(self) -> ConnectionMembers:
        self._next += 1
        self._connections[self._next] = {}
        return ConnectionMembers(self, self._next)

    def carried(self) -> dict[str, Carried]:
        """Each group with a member on some connection: its protocol and every id its members have."""
        ids: dict[str, set[str]] = {}
        protocols: dict[str, GroupProtocol] = {}
        for members in self._connections.values():
            for group, member in members.items():
                ids.setdefault(group, set()).update(member.ids)
                if member.protocol is not None:
                    protocols[group] = member.protocol
        return {g: Carried(protocols.get(g, "classic"), frozenset(i)) for g, i in sorted(ids.items())}

    def _apply(self, connection: int, observations: list[Observation]) -> None:
        mine = self._connections.get(connection)
        if mine is None:
            return  # closed meanwhile
        changed = False
        for seen in observations:
            if isinstance(seen, Member):
                changed |= self._record(mine, seen)
            elif seen.ids is None:
                changed |= self._drop(mine, seen.group)
            else:
                changed |= self._gone(seen.group, seen.ids)
        if changed:
            self._changed()

    def _record(self, mine: dict[str, Member], seen: Member) -> bool:
        before = mine.get(seen.group)
        if before is None:
            if len(mine) >= self._max_per_connection or (
                seen.group not in self._holders and len(self._holders) >= self._max_groups
            ):
                self.dropped += 1
                return False
            self._holders[seen.group] = self._holders.get(seen.group, 0) + 1
        elif before.member_id == seen.member_id:
            # Heartbeats send the instance id and the protocol only sometimes: keep what was learned.
            seen = Member(
                seen.group,
                seen.member_id,
                seen.instance_id or before.instance_id,
                seen.protocol or before.protocol,
            )
        mine[seen.group] = seen
        return seen != before

    def _gone(self, group: str, ids: frozenset[str]) -> bool:
        """Members that left, from whichever connection carried them (a client may leave on a connection
        other than the one it joined on, after its coordinator moved)."""
        changed = False
        for members in self._connections.values():
            member = members.get(group)
            if member is not None and member.ids & ids:
                changed |= self._drop(members, group)
        return changed

    def _drop(self, members: dict[str, Member], group: str) -> bool:
        if members.pop(group, None) is None:
            return False
        left = self._holders[group] - 1
        if left:
            self._holders[group] = left
        else:
            del self._holders[group]
        return True

    def _close(self, connection: int) -> None:
        members = self._connections.pop(connection, None)
        if members:
            for group in list(members):
                self._drop(members, group)
            self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


@dataclass
class ConnectionMembers:
    """One client connection's share of :class:`GroupMembers`."""

    members: GroupMembers
    connection: int

    def apply(self, observations: list[Observation]) -> None:
        if observations:
            self.members._apply(self.connection, observations)

    def close(self) -> None:
        """The connection closed: its members are no longer carried by this gateway."""
        self.members._close(self.connection)
