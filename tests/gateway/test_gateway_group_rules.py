"""Group tracking's pure part, on encoded requests and responses without a socket: which members an
exchange of a group API proves, what a connection closing or a member leaving removes, the bounds, and
what the gateway writes to the sightings topic and when."""

from __future__ import annotations

import datetime
import sys
from types import ModuleType
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from storage_core.gateway.group_members import (
    CONSUMER_GROUP_HEARTBEAT,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    MAX_GROUPS_PER_CONNECTION,
    OFFSET_COMMIT,
    SHARE_GROUP_HEARTBEAT,
    SYNC_GROUP,
    Carried,
    GroupMembers,
    observe,
)
from storage_core.gateway.group_sightings import (
    REPUBLISH_MS,
    direct_members,
    encode_sighting,
    latest_sightings,
)
from storage_core.gateway.group_writes import after_writing, due, topic_settings
from storage_core.gateway.protocol import (
    ProtocolError,
    RequestHeader,
    encode_request,
    encode_response,
    read_request_header,
    request_type,
    response_type,
)
from storage_core.gateway_server.group_watch import GroupWatch
from storage_core.gateway_server.metrics import GatewayMetrics

ZERO = datetime.timedelta(0)


def _module(entity: Any) -> ModuleType:
    return sys.modules[entity.__module__]


def request(api: int, version: int, **fields: Any) -> tuple[RequestHeader, bytes]:
    body = request_type(api, version)(**fields)
    frame = encode_request(RequestHeader(api, version, 7, "test", 0), body, 7)
    payload = b"".join(bytes(c) for c in frame[1:])
    return read_request_header(payload), payload


def response(api: int, version: int, **fields: Any) -> bytes:
    body = response_type(api, version)(**fields)
    return b"".join(bytes(c) for c in encode_response(api, version, 7, body)[1:])


def join(group: str, member: str, error: ErrorCode = ErrorCode.none, instance: str | None = None) -> Any:
    m = _module(request_type(JOIN_GROUP, 9))
    req = request(
        JOIN_GROUP,
        9,
        group_id=group,
        session_timeout=datetime.timedelta(seconds=45),
        rebalance_timeout=datetime.timedelta(seconds=60),
        member_id="",
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b""),),
    )
    resp = response(
        JOIN_GROUP,
        9,
        throttle_time=ZERO,
        error_code=error,
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=member,
        member_id=member,
        members=(),
    )
    return req, resp


def heartbeat(group: str, member: str, error: ErrorCode) -> Any:
    req = request(HEARTBEAT, 4, group_id=group, generation_id=1, member_id=member)
    return req, response(HEARTBEAT, 4, throttle_time=ZERO, error_code=error)


def kip848(group: str, member: str, epoch: int, error: ErrorCode = ErrorCode.none, **extra: Any) -> Any:
    req = request(
        CONSUMER_GROUP_HEARTBEAT,
        1,
        group_id=group,
        member_id=member,
        member_epoch=epoch,
        rebalance_timeout=datetime.timedelta(seconds=60),
        topic_partitions=None,
        **extra,
    )
    resp = response(
        CONSUMER_GROUP_HEARTBEAT,
        1,
        throttle_time=ZERO,
        error_code=error,
        member_id=member if error == ErrorCode.none else None,
        member_epoch=max(epoch, 0) + 1,
        heartbeat_interval=datetime.timedelta(seconds=3),
    )
    return req, resp


def commit(group: str, member: str, error: ErrorCode) -> Any:
    rq = _module(request_type(OFFSET_COMMIT, 9))
    rs = _module(response_type(OFFSET_COMMIT, 9))
    req = request(
        OFFSET_COMMIT,
        9,
        group_id=group,
        generation_id_or_member_epoch=1,
        member_id=member,
        topics=(
            rq.OffsetCommitRequestTopic(
                name="t",
                partitions=(
                    rq.OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=5,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )
    resp = response(
        OFFSET_COMMIT,
        9,
        throttle_time=ZERO,
        topics=(
            rs.OffsetCommitResponseTopic(
                name="t", partitions=(rs.OffsetCommitResponsePartition(partition_index=0, error_code=error),)
            ),
        ),
    )
    return req, resp


def seen(members: GroupMembers, exchanges: list[Any]) -> dict[str, Carried]:
    conn = members.open()
    for (header, payload), resp in exchanges:
        conn.apply(observe(header, payload, resp))
    return members.carried()


def apply(conn: Any, exchange: Any) -> None:
    (header, payload), resp = exchange
    conn.apply(observe(header, payload, resp))


# ---- what an exchange proves --------------------------------------------------------------------------
def test_an_accepted_join_carries_the_member_id_the_coordinator_gave_and_its_instance_id() -> None:
    members = GroupMembers()
    carried = seen(members, [join("g", "m-1", instance="static-a")])
    assert carried == {"g": Carried("classic", frozenset({"m-1", "static-a"}))}


def test_a_join_answered_member_id_required_or_refused_carries_nothing() -> None:
    members = GroupMembers()
    assert seen(members, [join("g", "m-1", ErrorCode.member_id_required)]) == {}
    assert seen(members, [join("g", "m-2", ErrorCode.group_authorization_failed)]) == {}


def test_a_heartbeat_counts_only_when_the_coordinator_accepts_it() -> None:
    """Claims are not enough: a heartbeat with a member id the group does not know proves nothing."""
    members = GroupMembers()
    assert seen(members, [heartbeat("g", "stranger", ErrorCode.unknown_member_id)]) == {}
    assert seen(members, [heartbeat("g", "stranger", ErrorCode.group_authorization_failed)]) == {}
    assert seen(members, [heartbeat("g", "m-1", ErrorCode.rebalance_in_progress)]) == {
        "g": Carried("classic", frozenset({"m-1"}))
    }


def test_unknown_member_id_drops_the_member_the_connection_carried() -> None:
    members = GroupMembers()
    conn = members.open()
    apply(conn, join("g", "m-1"))
    apply(conn, heartbeat("g", "m-1", ErrorCode.none))
    assert members.carried() == {"g": Carried("classic", frozenset({"m-1"}))}
    apply(conn, heartbeat("g", "m-1", ErrorCode.unknown_member_id))
    assert members.carried() == {}


def test_sync_group_is_observed() -> None:
    req = request(SYNC_GROUP, 5, group_id="g", generation_id=1, member_id="m-1", assignments=())
    resp = response(SYNC_GROUP, 5, throttle_time=ZERO, error_code=ErrorCode.none, assignment=b"")
    assert seen(GroupMembers(), [(req, resp)]) == {"g": Carried("classic", frozenset({"m-1"}))}


def test_a_rejoin_with_a_new_member_id_replaces_the_old_one_on_that_connection() -> None:
    members = GroupMembers()
    conn = members.open()
    apply(conn, join("g", "m-1"))
    apply(conn, join("g", "m-2"))
    assert members.carried() == {"g": Carried("classic", frozenset({"m-2"}))}


def test_leave_group_removes_members_by_id_or_instance_from_whichever_connection_carried_them() -> None:
    members = GroupMembers()
    a, b = members.open(), members.open()
    apply(a, join("g", "m-1", instance="static-a"))
    apply(b, join("g", "m-2"))
    m5 = _module(request_type(LEAVE_GROUP, 5))
    leave = request(
        LEAVE_GROUP, 5, group_id="g", members=(m5.MemberIdentity(member_id="", group_instance_id="static-a"),)
    )
    apply(b, (leave, b""))  # the response is not read: a leave counts whatever the coordinator says
    assert members.carried() == {"g": Carried("classic", frozenset({"m-2"}))}
    apply(b, (request(LEAVE_GROUP, 0, group_id="g", member_id="m-2"), b""))
    assert members.carried() == {}


def test_a_kip848_member_keeps_its_instance_id_across_heartbeats_and_leaves_with_epoch_minus_one() -> None:
    members = GroupMembers()
    conn = members.open()
    apply(conn, kip848("g", "uuid-1", 0, instance_id="static-b"))
    apply(conn, kip848("g", "uuid-1", 1))  # later heartbeats send the instance id only when it changes
    assert members.carried() == {"g": Carried("consumer", frozenset({"uuid-1", "static-b"}))}
    apply(conn, kip848("g", "uuid-1", -1))
    assert members.carried() == {}


def test_a_fenced_kip848_member_is_dropped() -> None:
    members = GroupMembers()
    conn = members.open()
    apply(conn, kip848("g", "uuid-1", 0))
    apply(conn, kip848("g", "uuid-1", 3, ErrorCode.fenced_member_epoch))
    assert members.carried() == {}


def test_a_share_group_member_is_carried_as_share() -> None:
    req = request(SHARE_GROUP_HEARTBEAT, 1, group_id="s", member_id="sm-1", member_epoch=0)
    resp = response(
        SHARE_GROUP_HEARTBEAT,
        1,
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        member_id="sm-1",
        member_epoch=1,
        heartbeat_interval=datetime.timedelta(seconds=5),
    )
    assert seen(GroupMembers(), [(req, resp)]) == {"s": Carried("share", frozenset({"sm-1"}))}


def test_an_offset_commit_counts_for_a_member_whose_every_partition_was_committed() -> None:
    assert seen(GroupMembers(), [commit("g", "m-1", ErrorCode.none)]) == {
        "g": Carried("classic", frozenset({"m-1"}))
    }
    assert seen(GroupMembers(), [commit("g", "m-1", ErrorCode.illegal_generation)]) == {}
    assert seen(GroupMembers(), [commit("g", "", ErrorCode.none)]) == {}, (
        "a commit outside the group protocol"
    )


def test_an_offset_commit_keeps_the_protocol_a_heartbeat_told() -> None:
    members = GroupMembers()
    conn = members.open()
    apply(conn, kip848("g", "uuid-1", 0))
    apply(conn, commit("g", "uuid-1", ErrorCode.none))
    assert members.carried() == {"g": Carried("consumer", frozenset({"uuid-1"}))}


# ---- connections, bounds, bad bytes --------------------------------------------------------------------
def test_a_closed_connection_takes_its_members_with_it_and_leaves_the_others() -> None:
    changes: list[int] = []
    members = GroupMembers(on_change=lambda: changes.append(1))
    a, b = members.open(), members.open()
    apply(a, join("g", "m-1"))
    apply(b, join("g", "m-2"))
    assert len(changes) == 2
    a.close()
    assert members.carried() == {"g": Carried("classic", frozenset({"m-2"}))}
    assert len(changes) == 3
    apply(a, heartbeat("g", "m-1", ErrorCode.none))  # an answer arriving after the close
    assert members.carried() == {"g": Carried("classic", frozenset({"m-2"}))}


def test_one_connection_makes_the_gateway_carry_at_most_max_groups_per_connection() -> None:
    members = GroupMembers()
    conn = members.open()
    for i in range(MAX_GROUPS_PER_CONNECTION + 5):
        apply(conn, heartbeat(f"g{i}", "m", ErrorCode.none))
    assert len(members.carried()) == MAX_GROUPS_PER_CONNECTION
    assert members.dropped == 5


def test_bytes_the_codec_cannot_read_raise_a_protocol_error_and_the_watch_counts_them() -> None:
    (header, payload), resp = heartbeat("g", "m-1", ErrorCode.none)
    with pytest.raises(ProtocolError):
        observe(header, payload[:-3], resp)
    with pytest.raises(ProtocolError):
        observe(header, payload, resp[:5])
    metrics = GatewayMetrics()
    members = GroupMembers()
    watch = GroupWatch(members, metrics)
    watch.seen(header, payload + b"\x00junk", resp)  # never raises: the frame was passed through already
    assert members.carried() == {}
    assert metrics.group_requests_unread.labels(api="heartbeat")._value.get() == 1
    watch.seen(header, payload, resp)
    assert members.carried() == {"g": Carried("classic", frozenset({"m-1"}))}
    watch.close()
    assert members.carried() == {}


def test_an_api_version_the_codec_lacks_says_nothing() -> None:
    header = RequestHeader(OFFSET_COMMIT, 1, 7, None, 8)  # OffsetCommit v1: not in the codec
    assert observe(header, b"\x00" * 8 + b"whatever", b"") == []


# ---- what is written, and when --------------------------------------------------------------------------
def test_a_new_group_is_written_at_once_then_again_every_republish_interval() -> None:
    carried = {"g": Carried("classic", frozenset({"m-1", "m-2"}))}
    first = due(carried, {}, "gw-0", 1_000)
    assert [(s.group, s.members, s.seen_ms) for s in first] == [("g", ("m-1", "m-2"), 1_000)]
    written = after_writing({}, first)
    assert due(carried, written, "gw-0", 1_000 + REPUBLISH_MS - 1) == []
    assert [s.seen_ms for s in due(carried, written, "gw-0", 1_000 + REPUBLISH_MS)] == [1_000 + REPUBLISH_MS]


def test_a_change_of_members_is_written_at_once_and_an_unacknowledged_write_is_due_again() -> None:
    written = after_writing({}, due({"g": Carried("classic", frozenset({"m-1"}))}, {}, "gw-0", 0))
    changed = {"g": Carried("classic", frozenset({"m-1", "m-2"}))}
    (sighting,) = due(changed, written, "gw-0", 10)
    assert sighting.members == ("m-1", "m-2")
    assert due(changed, after_writing(written, []), "gw-0", 11) != [], "not acknowledged: written again"


def test_a_group_no_longer_carried_is_written_empty_once_then_forgotten() -> None:
    written = after_writing({}, due({"g": Carried("consumer", frozenset({"u-1"}))}, {}, "gw-0", 0))
    (empty,) = due({}, written, "gw-0", 50)
    assert (empty.group, empty.protocol, empty.members, empty.seen_ms) == ("g", "consumer", (), 50)
    assert due({}, after_writing(written, [empty]), "gw-0", 50 + 10 * REPUBLISH_MS) == []


def test_what_the_gateway_writes_makes_its_members_not_direct_for_the_cleanup() -> None:
    carried = {"g": Carried("classic", frozenset({"m-1", "static-a"}))}
    records = [encode_sighting(s) for s in due(carried, {}, "gw-0", 1_000)]
    sightings = latest_sightings(records)
    assert direct_members(["m-1", "m-9"], sightings, "g", 2_000) == {"m-9"}
    left = due({}, after_writing({}, due(carried, {}, "gw-0", 1_000)), "gw-0", 3_000)  # the member left
    sightings = latest_sightings(records + [encode_sighting(s) for s in left])
    assert [s.members for s in sightings["g"]] == [()], "the empty record replaces the one with members"
    assert direct_members(["m-1"], sightings, "g", 4_000) == {"m-1"}


@pytest.mark.parametrize(("brokers", "rf", "isr"), [(1, 1, "1"), (2, 2, "1"), (3, 3, "2"), (6, 3, "2")])
def test_the_sightings_topic_is_compacted_replicated_as_kafkas_own_and_writable_with_a_broker_down(
    brokers: int, rf: int, isr: str
) -> None:
    settings = topic_settings(brokers)
    assert (settings.partitions, settings.replication_factor) == (1, rf)
    assert settings.config["min.insync.replicas"] == isr
    assert settings.config["cleanup.policy"] == "compact,delete"


def test_the_gateway_carries_at_most_max_groups_and_a_group_gone_frees_its_place() -> None:
    members = GroupMembers(max_groups=3)
    a, b = members.open(), members.open()
    for i in range(3):
        apply(a, heartbeat(f"g{i}", "m", ErrorCode.none))
    apply(b, heartbeat("g0", "m-b", ErrorCode.none))  # a group already carried: no new place taken
    apply(b, heartbeat("g9", "m-b", ErrorCode.none))
    assert sorted(members.carried()) == ["g0", "g1", "g2"] and members.dropped == 1
    a.close()
    apply(b, heartbeat("g9", "m-b", ErrorCode.none))
    assert sorted(members.carried()) == ["g0", "g9"]
