"""The interceptions on the oldest versions the gateway offers, whose messages lack later fields (Fetch v4
has no log start offset, ListOffsets v1 no leader epoch): the answer keeps the version's shape."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4 import response as fetch_v4
from kio.schema.list_offsets.v1 import response as offsets_v1

from storage_core.gateway.fetch import TierAnswer, with_answers
from storage_core.gateway.offsets import EARLIEST, TierOffset, with_tier
from storage_core.gateway.protocol import decode_response, encode_response


def test_a_fetch_v4_answer_from_the_tier_has_no_log_start_field_and_round_trips() -> None:
    response = fetch_v4.FetchResponse(
        throttle_time=datetime.timedelta(0),
        responses=(
            fetch_v4.FetchableTopicResponse(
                topic="t",
                partitions=(
                    fetch_v4.PartitionData(
                        partition_index=0,
                        error_code=ErrorCode.offset_out_of_range,
                        high_watermark=-1,
                        last_stable_offset=-1,
                        aborted_transactions=None,
                        records=None,
                    ),
                ),
            ),
        ),
    )
    answer = TierAnswer(b"batches", 100, 90, 0, ((7, 3),))
    body = with_answers(response, {("t", 0): answer})
    (part,) = body.responses[0].partitions
    assert (part.error_code, part.high_watermark, part.last_stable_offset, part.records) == (
        ErrorCode.none,
        100,
        90,
        b"batches",
    )
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(7, 3)]
    decoded = decode_response(1, 4, b"".join(encode_response(1, 4, 5, body)[1:]))
    assert decoded == body


def test_a_list_offsets_v1_earliest_from_the_tier_has_no_leader_epoch_field() -> None:
    response = offsets_v1.ListOffsetsResponse(
        topics=(
            offsets_v1.ListOffsetsTopicResponse(
                name="t",
                partitions=(
                    offsets_v1.ListOffsetsPartitionResponse(
                        partition_index=0, error_code=ErrorCode.none, timestamp=-1, offset=500
                    ),
                ),
            ),
        )
    )
    body = with_tier(response, {("t", 0, EARLIEST): TierOffset(0, -1, 3)})
    assert body.topics[0].partitions[0].offset == 0
    assert decode_response(2, 1, b"".join(encode_response(2, 1, 9, body)[1:])) == body
