"""Fetch, intercepted: which partitions the tier answers, and the response with its answers in place.

Fetch sessions (KIP-227) are kept out: every request goes to the broker as a sessionless full fetch
(session id 0, epoch -1) and every response says session id 0, which tells the client that no session
exists, so it keeps sending full requests. The gateway then always knows every partition's fetch offset,
and the broker's session cache is never filled by sessions nobody would use.

A partition is served from the tier only when the broker itself answered it on the client's own
connection with OFFSET_OUT_OF_RANGE: that answer comes after the broker's authorization check, so a
principal without READ (TOPIC_AUTHORIZATION_FAILED) never gets a byte of history.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, ResponsePayload

from storage_core.gateway.messages import fetch_response
from storage_core.gateway.protocol import built, replaced
from storage_core.gateway.ranges import Buffer

if TYPE_CHECKING:
    from storage_core.gateway.messages import FetchRequest, FetchResponse

TopicKey = str | uuid.UUID
"""A topic as the request names it: its name (Fetch v4-12) or its topic id (v13+)."""
PartitionKey = tuple[TopicKey, int]

FINAL_EPOCH = -1


@dataclass(frozen=True, slots=True)
class Wanted:
    offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class TierAnswer:
    """What replaces the broker's OFFSET_OUT_OF_RANGE for one partition."""

    records: Buffer | None
    """Served as they are: a slice of what was read (kio writes any buffer), never copied to bytes."""
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...] | None
    error: ErrorCode = ErrorCode.none


def topic_key(topic: object) -> TopicKey:
    """A request's or response's topic, by name (Fetch v4-12) or id (v13+)."""
    name = getattr(topic, "topic", None)
    key: TopicKey = name if name is not None else getattr(topic, "topic_id")  # noqa: B009 - v13+ only
    return key


def sessionless(request: FetchRequest) -> FetchRequest:
    """The request as a full fetch outside any session (or the same object when it already is one)."""
    if not hasattr(request, "session_id"):  # before v7: no sessions at all
        return request
    if (
        getattr(request, "session_id", 0) == 0
        and getattr(request, "session_epoch", FINAL_EPOCH) == FINAL_EPOCH
        and not getattr(request, "forgotten_topics_data", ())
    ):
        return request
    return replaced(request, session_id=0, session_epoch=FINAL_EPOCH, forgotten_topics_data=())


def session_id(message: FetchRequest | FetchResponse) -> int:
    """A Fetch request's or response's session id (0 before v7, which had no sessions)."""
    return int(getattr(message, "session_id", 0))


def wanted(request: FetchRequest) -> dict[PartitionKey, Wanted]:
    return {
        (topic_key(t), p.partition): Wanted(p.fetch_offset, p.partition_max_bytes)
        for t in request.topics
        for p in t.partitions
    }


def out_of_range(response: FetchResponse) -> list[PartitionKey]:
    """Partitions the broker answered with OFFSET_OUT_OF_RANGE, in response order."""
    return [
        (topic_key(t), p.partition_index)
        for t in response.responses
        for p in t.partitions
        if p.error_code == ErrorCode.offset_out_of_range
    ]


def records_bytes(response: FetchResponse) -> int:
    return sum(len(p.records or b"") for t in response.responses for p in t.partitions)


def with_answers(response: FetchResponse, answers: Mapping[PartitionKey, TierAnswer]) -> FetchResponse:
    """The response with the tier's answers in place of the broker's, and no session."""
    topics = []
    for t in response.responses:
        key = topic_key(t)
        parts = []
        for p in t.partitions:
            answer = answers.get((key, p.partition_index))
            parts.append(p if answer is None else _answered(p, answer))
        topics.append(replaced(t, partitions=tuple(parts)))
    return replaced(response, responses=tuple(topics), session_id=0)


_Partition = TypeVar("_Partition", bound=Entity)


def _answered(partition: _Partition, answer: TierAnswer) -> _Partition:
    """The broker's partition data with the tier's answer in its place (same Fetch version)."""
    aborted = None
    if answer.aborted is not None:
        aborted = [{"producer_id": pid, "first_offset": first} for pid, first in answer.aborted]
    return replaced(
        partition,
        error_code=answer.error,
        high_watermark=answer.high_watermark,
        last_stable_offset=answer.last_stable_offset,
        log_start_offset=answer.log_start_offset,
        aborted_transactions=aborted,
        records=answer.records,
    )


def unanswered(response_type: type[ResponsePayload], request: FetchRequest) -> FetchResponse:
    """A response of ``response_type`` to ``request`` in which every partition is answered
    OFFSET_OUT_OF_RANGE and nothing else: what a fetch under live grants (storage_core/gateway/grants.py)
    stands for before :func:`with_answers` puts the tier's answers in place."""
    topics = [
        {
            "topic": getattr(t, "topic", None),
            "topic_id": getattr(t, "topic_id", None),
            "partitions": [
                {
                    "partition_index": p.partition,
                    "error_code": ErrorCode.offset_out_of_range,
                    "high_watermark": -1,
                    "last_stable_offset": -1,
                    "log_start_offset": -1,
                    "aborted_transactions": None,
                    "preferred_read_replica": -1,
                    "records": None,
                }
                for p in t.partitions
            ],
        }
        for t in request.topics
    ]
    body = built(
        response_type,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=topics,
    )
    return fetch_response(body)


def without_session(response: FetchResponse) -> FetchResponse:
    return response if session_id(response) == 0 else replaced(response, session_id=0)


def session_not_found(response_type: type[ResponsePayload]) -> ResponsePayload:
    """The answer to an incremental fetch: the gateway keeps no sessions, so the client starts over."""
    return built(
        response_type,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.fetch_session_id_not_found,
        session_id=0,
        responses=(),
    )
