"""The gateway's pure decisions, without a socket: address rewriting, the versions it offers, which Fetch
partitions the tier answers and how, and which ListOffsets answers come from the tier."""

from __future__ import annotations

import dataclasses
import datetime
import sys
import uuid
from types import ModuleType

import pytest
from kio.schema.errors import ErrorCode

from storage_core.errors import ConfigError
from storage_core.gateway import fetch as fetch_rules
from storage_core.gateway import offsets as offset_rules
from storage_core.gateway.addresses import Address, PortRule, rewrite_addresses
from storage_core.gateway.protocol import request_type, response_type, supported_versions
from storage_core.gateway.versions import NOT_OFFERED, negotiated, offered_versions

RULE = PortRule("gw.example", 9192, 9200)
ZERO = datetime.timedelta(0)


def response_module(api_key: int, version: int) -> ModuleType:
    return sys.modules[response_type(api_key, version).__module__]


def request_module(api_key: int, version: int) -> ModuleType:
    return sys.modules[request_type(api_key, version).__module__]


# ---- addresses ----------------------------------------------------------------------------------------
def test_the_port_rule_is_base_plus_node_id_and_refuses_ports_that_do_not_exist() -> None:
    assert RULE.broker_address(3) == Address("gw.example", 9203)
    with pytest.raises(ConfigError):
        RULE.broker_port(-1)
    with pytest.raises(ConfigError):
        PortRule("h", 1, 65000).broker_port(600)


def test_metadata_brokers_point_at_the_gateway_and_the_real_ones_are_learned() -> None:
    m = response_module(3, 12)
    body = m.MetadataResponse(
        throttle_time=ZERO,
        brokers=(
            m.MetadataResponseBroker(node_id=1, host="10.0.0.1", port=9092, rack="a"),
            m.MetadataResponseBroker(node_id=2, host="10.0.0.2", port=9093, rack=None),
        ),
        cluster_id="c",
        controller_id=1,
        topics=(),
    )
    out = rewrite_addresses(3, body, RULE)
    assert [(b.node_id, b.host, b.port, b.rack) for b in out.body.brokers] == [
        (1, "gw.example", 9201, "a"),
        (2, "gw.example", 9202, None),
    ]
    assert out.brokers == {1: Address("10.0.0.1", 9092), 2: Address("10.0.0.2", 9093)}
    assert out.complete
    assert out.body.cluster_id == "c" and out.body.controller_id == 1


def test_find_coordinator_v3_one_node_and_no_coordinator() -> None:
    m = response_module(10, 3)
    found = m.FindCoordinatorResponse(
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        error_message=None,
        node_id=2,
        host="10.0.0.2",
        port=9093,
    )
    out = rewrite_addresses(10, found, RULE)
    assert (out.body.node_id, out.body.host, out.body.port) == (2, "gw.example", 9202)
    assert out.brokers == {2: Address("10.0.0.2", 9093)} and not out.complete
    none = dataclasses.replace(
        found, error_code=ErrorCode.coordinator_not_available, node_id=-1, host="", port=-1
    )
    out = rewrite_addresses(10, none, RULE)
    assert out.body is none and out.brokers == {}


def test_find_coordinator_v4_each_coordinator_and_the_missing_one_kept() -> None:
    m = response_module(10, 4)
    body = m.FindCoordinatorResponse(
        throttle_time=ZERO,
        coordinators=(
            m.Coordinator(
                key="g1", node_id=3, host="10.0.0.3", port=9094, error_code=ErrorCode.none, error_message=None
            ),
            m.Coordinator(
                key="g2",
                node_id=-1,
                host="",
                port=-1,
                error_code=ErrorCode.coordinator_not_available,
                error_message=None,
            ),
        ),
    )
    out = rewrite_addresses(10, body, RULE)
    assert [(c.key, c.node_id, c.host, c.port) for c in out.body.coordinators] == [
        ("g1", 3, "gw.example", 9203),
        ("g2", -1, "", -1),
    ]
    assert out.brokers == {3: Address("10.0.0.3", 9094)} and not out.complete


def test_describe_cluster_brokers() -> None:
    m = response_module(60, 1)
    body = m.DescribeClusterResponse(
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        cluster_id="c",
        brokers=(m.DescribeClusterBroker(broker_id=5, host="b5", port=1234, rack=None),),
    )
    out = rewrite_addresses(60, body, RULE)
    assert [(b.broker_id, b.host, b.port) for b in out.body.brokers] == [(5, "gw.example", 9205)]
    assert out.brokers == {5: Address("b5", 1234)} and out.complete


@pytest.mark.parametrize(("api_key", "version"), [(1, 16), (1, 17), (0, 10), (0, 11)])
def test_fetch_and_produce_node_endpoints(api_key: int, version: int) -> None:
    m = response_module(api_key, version)
    body = response_type(api_key, version)(
        throttle_time=ZERO,
        responses=(),
        node_endpoints=(m.NodeEndpoint(node_id=2, host="10.0.0.2", port=9093, rack=None),),
        **({"error_code": ErrorCode.none} if api_key == 1 else {}),
    )
    out = rewrite_addresses(api_key, body, RULE)
    assert [(n.node_id, n.host, n.port) for n in out.body.node_endpoints] == [(2, "gw.example", 9202)]
    assert out.brokers == {2: Address("10.0.0.2", 9093)} and not out.complete
    empty = dataclasses.replace(body, node_endpoints=())
    assert rewrite_addresses(api_key, empty, RULE).body is empty


def test_a_response_without_addresses_is_the_same_object() -> None:
    m = response_module(2, 9)
    body = m.ListOffsetsResponse(throttle_time=ZERO, topics=())
    assert rewrite_addresses(2, body, RULE).body is body


# ---- versions -----------------------------------------------------------------------------------------
def test_offered_versions_are_cut_to_what_the_codec_reads_and_drop_the_rest() -> None:
    m = response_module(18, 3)
    spans = supported_versions()
    share = min(NOT_OFFERED)
    body = m.ApiVersionsResponse(
        error_code=ErrorCode.none,
        throttle_time=ZERO,
        api_keys=(
            m.ApiVersion(api_key=1, min_version=0, max_version=99),  # Fetch: cut on both sides
            m.ApiVersion(api_key=3, min_version=1, max_version=5),  # Metadata: inside, kept as is
            m.ApiVersion(api_key=share, min_version=0, max_version=1),  # share groups: not offered
            m.ApiVersion(api_key=30000, min_version=0, max_version=1),  # unknown to the codec
            m.ApiVersion(api_key=0, min_version=99, max_version=100),  # no common version
        ),
    )
    out = offered_versions(body)
    assert [(a.api_key, a.min_version, a.max_version) for a in out.api_keys] == [
        (1, spans[1][0], spans[1][1]),
        (3, 1, 5),
    ]
    assert negotiated({1: (0, 99)}, 1) == spans[1][1]
    assert negotiated({1: (0, spans[1][0] - 1)}, 1) is None
    assert negotiated({}, 1) is None
    assert negotiated({30000: (0, 1)}, 30000) is None


# ---- fetch --------------------------------------------------------------------------------------------
def _fetch_request(session_id: int = 0, epoch: int = -1, forgotten: bool = False) -> object:
    m = request_module(1, 12)
    return m.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=1000,
        session_id=session_id,
        session_epoch=epoch,
        topics=(
            m.FetchTopic(
                topic="t",
                partitions=(
                    m.FetchPartition(partition=0, fetch_offset=5, partition_max_bytes=100),
                    m.FetchPartition(partition=1, fetch_offset=50, partition_max_bytes=200),
                ),
            ),
        ),
        forgotten_topics_data=(m.ForgottenTopic(topic="u", partitions=(0,)),) if forgotten else (),
    )


def test_sessionless_makes_every_fetch_a_full_one_outside_any_session() -> None:
    plain = _fetch_request()
    assert fetch_rules.sessionless(plain) is plain
    for request in (
        _fetch_request(session_id=7, epoch=3),
        _fetch_request(epoch=0),
        _fetch_request(forgotten=True),
    ):
        out = fetch_rules.sessionless(request)
        assert (out.session_id, out.session_epoch, out.forgotten_topics_data) == (0, -1, ())
        assert out.topics == request.topics
    assert fetch_rules.wanted(plain) == {
        ("t", 0): fetch_rules.Wanted(5, 100),
        ("t", 1): fetch_rules.Wanted(50, 200),
    }


def _fetch_response(version: int, codes: dict[int, ErrorCode], topic: str | uuid.UUID) -> object:
    m = response_module(1, version)
    by_id = version >= 13
    return m.FetchResponse(
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        session_id=42,
        responses=(
            m.FetchableTopicResponse(
                **({"topic_id": topic} if by_id else {"topic": topic}),
                partitions=tuple(
                    m.PartitionData(
                        partition_index=p,
                        error_code=code,
                        high_watermark=-1 if code else 100,
                        aborted_transactions=None,
                        records=None if code else b"broker-bytes",
                    )
                    for p, code in codes.items()
                ),
            ),
        ),
    )


@pytest.mark.parametrize("version", [12, 16])
def test_out_of_range_partitions_get_the_tier_answer_and_the_others_stay(version: int) -> None:
    topic: str | uuid.UUID = uuid.UUID(int=9) if version >= 13 else "t"
    codes = {0: ErrorCode.offset_out_of_range, 1: ErrorCode.none, 2: ErrorCode.topic_authorization_failed}
    response = _fetch_response(version, codes, topic)
    assert fetch_rules.out_of_range(response) == [(topic, 0)]
    assert fetch_rules.records_bytes(response) == len(b"broker-bytes")
    answer = fetch_rules.TierAnswer(
        records=b"tier-bytes",
        high_watermark=100,
        last_stable_offset=90,
        log_start_offset=0,
        aborted=((7, 3),),
    )
    out = fetch_rules.with_answers(response, {(topic, 0): answer})
    parts = {p.partition_index: p for t in out.responses for p in t.partitions}
    assert parts[0].error_code == ErrorCode.none
    assert (
        parts[0].records,
        parts[0].high_watermark,
        parts[0].last_stable_offset,
        parts[0].log_start_offset,
    ) == (
        b"tier-bytes",
        100,
        90,
        0,
    )
    assert [(a.producer_id, a.first_offset) for a in parts[0].aborted_transactions] == [(7, 3)]
    assert parts[1] == response.responses[0].partitions[1]
    assert parts[2].error_code == ErrorCode.topic_authorization_failed and parts[2].records is None
    assert out.session_id == 0, "the client is told that no session exists"


def test_a_tier_error_replaces_the_out_of_range_answer_with_a_retriable_one() -> None:
    response = _fetch_response(12, {0: ErrorCode.offset_out_of_range}, "t")
    error = fetch_rules.TierAnswer(None, -1, -1, -1, None, ErrorCode.kafka_storage_error)
    out = fetch_rules.with_answers(response, {("t", 0): error})
    (part,) = out.responses[0].partitions
    assert part.error_code == ErrorCode.kafka_storage_error and part.error_code.retriable
    assert part.records is None and part.aborted_transactions is None


def test_read_uncommitted_answers_list_no_aborted_transactions_and_incremental_fetches_start_over() -> None:
    response = _fetch_response(12, {0: ErrorCode.offset_out_of_range}, "t")
    answer = fetch_rules.TierAnswer(b"x", 10, 10, 0, None)
    (part,) = fetch_rules.with_answers(response, {("t", 0): answer}).responses[0].partitions
    assert part.aborted_transactions is None
    refused = fetch_rules.session_not_found(response_type(1, 12))
    assert refused.error_code == ErrorCode.fetch_session_id_not_found and refused.session_id == 0
    assert fetch_rules.without_session(response).session_id == 0


# ---- offsets ------------------------------------------------------------------------------------------
def _list_offsets(asked: dict[int, int], answered: dict[int, tuple[ErrorCode, int]]) -> tuple[object, object]:
    q, r = request_module(2, 9), response_module(2, 9)
    request = q.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            q.ListOffsetsTopic(
                name="t",
                partitions=tuple(
                    q.ListOffsetsPartition(partition_index=p, timestamp=ts) for p, ts in asked.items()
                ),
            ),
        ),
    )
    response = r.ListOffsetsResponse(
        throttle_time=ZERO,
        topics=(
            r.ListOffsetsTopicResponse(
                name="t",
                partitions=tuple(
                    r.ListOffsetsPartitionResponse(
                        partition_index=p, error_code=code, timestamp=-1, offset=offset, leader_epoch=0
                    )
                    for p, (code, offset) in answered.items()
                ),
            ),
        ),
    )
    return request, response


def test_tier_questions_are_earliest_max_timestamp_latest_tiered_and_timestamps_answered_without_error() -> (
    None
):
    e, lt, latest, mts, el = (
        offset_rules.EARLIEST,
        offset_rules.LATEST_TIERED,
        offset_rules.LATEST,
        offset_rules.MAX_TIMESTAMP,
        offset_rules.EARLIEST_LOCAL,
    )
    ok = ErrorCode.none
    request, response = _list_offsets(
        {0: e, 1: lt, 2: latest, 3: mts, 4: el, 5: 1_700_000_000_000, 6: e},
        {
            0: (ok, 100),
            1: (ok, -1),
            2: (ok, 500),
            3: (ok, 499),
            4: (ok, 100),
            5: (ok, 300),
            6: (ErrorCode.topic_authorization_failed, -1),
        },
    )
    assert offset_rules.questions(request, response) == [
        ("t", 0, e),
        ("t", 1, lt),
        ("t", 3, mts),
        ("t", 5, 1_700_000_000_000),
    ]


def test_the_tier_answers_only_where_it_is_kafkas_answer_for_a_tiered_log() -> None:
    ok = ErrorCode.none
    ts = 1_700_000_000_000
    request, response = _list_offsets(
        {
            0: offset_rules.EARLIEST,
            1: offset_rules.LATEST_TIERED,
            2: ts,
            3: ts,
            4: offset_rules.EARLIEST,
            5: ts,
        },
        {0: (ok, 100), 1: (ok, -1), 2: (ok, 300), 3: (ok, 300), 4: (ok, 0), 5: (ok, -1)},
    )
    tier = {
        ("t", 0, offset_rules.EARLIEST): offset_rules.TierOffset(0, -1, 1),  # below the broker: the tier's
        ("t", 1, offset_rules.LATEST_TIERED): None,  # nothing tiered: -1
        ("t", 2, ts): offset_rules.TierOffset(40, ts + 5, 2),  # older than the local log
        ("t", 3, ts): offset_rules.TierOffset(300, ts + 5, 2),  # not below the broker's: the broker's
        ("t", 4, offset_rules.EARLIEST): offset_rules.TierOffset(0, -1, 1),  # broker already at 0
        ("t", 5, ts): offset_rules.TierOffset(40, ts + 5, 2),  # broker found none at all: the tier's
    }
    out = offset_rules.with_tier(response, tier)
    got = {p.partition_index: (p.offset, p.timestamp, p.leader_epoch) for p in out.topics[0].partitions}
    assert got == {
        0: (0, -1, 1),
        1: (-1, -1, -1),
        2: (40, ts + 5, 2),
        3: (300, -1, 0),
        4: (0, -1, 0),
        5: (40, ts + 5, 2),
    }
    unchanged = offset_rules.with_tier(response, {("t", 3, ts): offset_rules.TierOffset(300, ts, 2)})
    assert unchanged is response
    failed = offset_rules.with_errors(response, {("t", 0): ErrorCode.kafka_storage_error})
    first = failed.topics[0].partitions[0]
    assert (first.error_code, first.offset, first.timestamp) == (ErrorCode.kafka_storage_error, -1, -1)
    assert failed.topics[0].partitions[1:] == response.topics[0].partitions[1:]


def test_max_timestamp_is_the_tiers_record_when_later_or_as_late_and_earlier() -> None:
    ok, mts, ts = ErrorCode.none, offset_rules.MAX_TIMESTAMP, 1_700_000_000_000
    request, response = _list_offsets(
        dict.fromkeys(range(5), mts), {p: (ok, 900 if p < 4 else -1) for p in range(5)}
    )
    # The broker's answers: its local log's largest timestamp at offset 900; partition 4's log is empty.
    topic = response.topics[0]
    parts = tuple(dataclasses.replace(p, timestamp=ts if p.offset >= 0 else -1) for p in topic.partitions)
    response = dataclasses.replace(response, topics=(dataclasses.replace(topic, partitions=parts),))
    tier = {
        ("t", 0, mts): offset_rules.TierOffset(40, ts + 1, 2),  # later than every local record: the tier's
        ("t", 1, mts): offset_rules.TierOffset(40, ts, 2),  # as late, at an earlier offset: the tier's
        ("t", 2, mts): offset_rules.TierOffset(40, ts - 1, 2),  # older: the broker's
        ("t", 3, mts): None,  # nothing tiered: the broker's
        ("t", 4, mts): offset_rules.TierOffset(40, ts - 1, 2),  # no local record: the tier's
    }
    out = offset_rules.with_tier(response, tier)
    got = {p.partition_index: (p.offset, p.timestamp, p.leader_epoch) for p in out.topics[0].partitions}
    assert got == {0: (40, ts + 1, 2), 1: (40, ts, 2), 2: (900, ts, 0), 3: (900, ts, 0), 4: (40, ts - 1, 2)}
