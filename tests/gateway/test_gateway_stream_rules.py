"""The gateway's pure rules for answering faster: which Fetch responses stream through as they arrive
(decided from their first bytes, checked at their last), and which fetches live grants let the tier answer
without asking the broker first."""

from __future__ import annotations

import datetime
import sys
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from storage_core.gateway import fetch as fetch_rules
from storage_core.gateway.fetch_stream import NeedMore, plain_fetch, tail_is_plain
from storage_core.gateway.grants import Grants
from storage_core.gateway.protocol import built, encode_response, request_type, response_type

ZERO = datetime.timedelta(0)
RECORDS = bytes(range(256)) * 300
FETCH_VERSIONS = range(4, 19)


def _module(version: int) -> Any:
    return sys.modules[response_type(1, version).__module__]


def _response(
    version: int,
    *,
    partitions: tuple[int, ...] = (0,),
    code: ErrorCode = ErrorCode.none,
    session_id: int = 0,
    aborted: int = 0,
    endpoints: bool = False,
) -> Any:
    m = _module(version)

    def part(p: int) -> Any:
        fields = {
            "partition_index": p,
            "error_code": code,
            "high_watermark": 1000,
            "last_stable_offset": 900,
            "log_start_offset": 10,
            "aborted_transactions": tuple(
                m.AbortedTransaction(producer_id=i, first_offset=i * 10) for i in range(aborted)
            ),
            "preferred_read_replica": -1,
            "records": RECORDS,
        }
        return built(m.PartitionData, **fields)

    topic = built(
        m.FetchableTopicResponse,
        topic="history",
        topic_id=uuid.UUID(int=7),
        partitions=tuple(part(p) for p in partitions),
    )
    extra: dict[str, Any] = {}
    if endpoints:
        extra["node_endpoints"] = (m.NodeEndpoint(node_id=1, host="10.0.0.1", port=9092, rack=None),)
    return built(
        response_type(1, version),
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        session_id=session_id,
        responses=(topic,),
        **extra,
    )


def _after_correlation_id(version: int, body: Any) -> bytes:
    """The response payload after its correlation id, as the gateway reads it from the broker."""
    return b"".join(bytes(c) for c in encode_response(1, version, 99, body))[8:]


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_a_one_partition_error_free_response_streams_and_its_records_are_found_exactly(version: int) -> None:
    data = _after_correlation_id(version, _response(version, aborted=2 if version >= 4 else 0))
    plain = plain_fetch(version, data)
    assert plain is not None
    assert data[plain.records_start : plain.records_end] == RECORDS
    assert tail_is_plain(version, data[plain.records_end :])
    # Cut anywhere before the records start, the decision waits for more bytes; never a wrong answer.
    for cut in range(plain.records_start):
        with pytest.raises(NeedMore):
            plain_fetch(version, data[:cut])


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_responses_the_gateway_may_change_do_not_stream(version: int) -> None:
    cases = [
        _response(version, partitions=(0, 1)),  # a later partition's error would come after records
        _response(version, code=ErrorCode.offset_out_of_range),  # the tier may answer it
        _response(version, code=ErrorCode.not_leader_or_follower),  # NodeEndpoints to rewrite
    ]
    if version >= 7:
        cases.append(_response(version, session_id=5))  # the client must be told: no session
    for body in cases:
        assert plain_fetch(version, _after_correlation_id(version, body)) is None


@pytest.mark.parametrize("version", [16, 17, 18])
def test_node_endpoints_in_the_tail_stop_a_streamed_response_from_ending_as_sent(version: int) -> None:
    data = _after_correlation_id(version, _response(version, endpoints=True))
    plain = plain_fetch(version, data)
    assert plain is not None, "the partition header alone cannot tell"
    assert not tail_is_plain(version, data[plain.records_end :])
    assert not tail_is_plain(version, data[plain.records_end : -1]), "a short tail is not plain either"
    assert not tail_is_plain(version, data[plain.records_end :] + b"\0"), "nor one with bytes left over"


def test_old_versions_have_no_tail_and_before_v4_nothing_streams() -> None:
    assert tail_is_plain(4, b"") and not tail_is_plain(4, b"\0")
    assert plain_fetch(3, b"\0" * 64) is None


# ---- grants -----------------------------------------------------------------------------------------------
def test_a_grant_covers_offsets_below_the_brokers_log_start_until_it_expires() -> None:
    grants = Grants(recheck_s=1.0)
    grants.grant(("t", 0), sent_at=100.0, local_start=500, incarnation="id-1")
    covered = grants.covers([(("t", 0), 10)], now=100.5)
    assert covered is not None and covered[("t", 0)].incarnation == "id-1"
    assert grants.covers([(("t", 0), 500)], now=100.5) is None, "the broker's own offsets are its to serve"
    assert grants.covers([(("t", 0), 10), (("t", 1), 10)], now=100.5) is None, "a partition without a grant"
    assert grants.covers([(("t", 0), 10)], now=101.0) is None, "expired: from the fetch's send time"
    assert len(grants) == 0, "an expired grant is dropped"


def test_a_later_grant_extends_an_earlier_one_never_the_reverse_and_zero_grants_nothing() -> None:
    grants = Grants(recheck_s=1.0)
    grants.grant(("t", 0), sent_at=100.0, local_start=500, incarnation="a")
    grants.grant(("t", 0), sent_at=99.0, local_start=400, incarnation="a")  # a slow answer, sent earlier
    assert grants.covers([(("t", 0), 450)], now=100.9) is not None
    grants.revoke(("t", 0))
    assert grants.covers([(("t", 0), 1)], now=100.1) is None
    off = Grants(recheck_s=0)
    off.grant(("t", 0), sent_at=100.0, local_start=500, incarnation="a")
    assert off.covers([(("t", 0), 1)], now=100.0) is None
    assert Grants(1.0).covers([], now=0.0) is None, "an empty fetch is the broker's"


@pytest.mark.parametrize("version", [4, 12, 13, 17])
def test_an_unanswered_response_names_every_requested_partition_out_of_range(version: int) -> None:
    m = sys.modules[request_type(1, version).__module__]
    topic = built(
        m.FetchTopic,
        topic="t",
        topic_id=uuid.UUID(int=3),
        partitions=tuple(
            built(m.FetchPartition, partition=p, fetch_offset=5, partition_max_bytes=100) for p in (0, 2)
        ),
    )
    request = built(
        request_type(1, version),
        replica_id=-1,
        max_wait=ZERO,
        min_bytes=1,
        max_bytes=1000,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(topic,),
        forgotten_topics_data=(),
        rack_id="",
    )
    body = fetch_rules.unanswered(response_type(1, version), request)
    key = "t" if version < 13 else uuid.UUID(int=3)
    assert fetch_rules.out_of_range(body) == [(key, 0), (key, 2)]
    encode_response(1, version, 1, body)  # a response the codec writes
