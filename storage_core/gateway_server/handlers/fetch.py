"""Fetch, decided in one place: what goes to the broker, what the tier answers, and what reaches the client.

1. An incremental fetch (a session id) is answered FETCH_SESSION_ID_NOT_FOUND: the gateway keeps no
   sessions, so the client starts over with full fetches (storage_core/gateway/fetch.py).
2. Under live grants for every partition it names (storage_core/gateway/grants.py) the tier answers the
   whole fetch without a broker round trip.
3. Otherwise the fetch goes to the broker sessionless. A large response with nothing to change streams to
   the client as it arrives (cut-through, storage_core/gateway/fetch_stream.py); the others are read whole,
   their OFFSET_OUT_OF_RANGE partitions answered from the tier when it holds the offset (each earning a
   grant), their NodeEndpoints rewritten, and their session id cleared.

A partition is answered from the tier only under the broker's authorization on this connection: its
OFFSET_OUT_OF_RANGE to the client's fetch, or a grant such an answer earned a moment ago (at most
``Limits.grant_s``). Where the tier's bytes are computed, and read ahead, is gateway_server/tier_answers.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from storage_core.errors import TierkeeperError
from storage_core.gateway import fetch as fetch_rules
from storage_core.gateway.addresses import rewrite_addresses
from storage_core.gateway.fetch_stream import STREAM_MIN_BYTES, NeedMore, plain_fetch, tail_is_plain
from storage_core.gateway.grants import Grant
from storage_core.gateway.history import TierSlice
from storage_core.gateway.messages import fetch_request, fetch_response
from storage_core.gateway.protocol import (
    CORRELATION_ID,
    SIZE,
    ApiKey,
    Chunks,
    ProtocolError,
    encode_request,
    response_type,
)
from storage_core.gateway_server.call import Call
from storage_core.gateway_server.upstream import STREAMED, Streamer
from storage_core.remote.layout import TopicPartitionId

if TYPE_CHECKING:
    from storage_core.gateway.messages import FetchRequest, FetchResponse

log = logging.getLogger("tierkeeper.gateway")

READ_COMMITTED = 1
STREAM_HEAD_BYTES = 4 << 10
"""Read before deciding: a one-partition response's headers fit unless its topic name or aborted
transactions are unusually long (it is then stored and forwarded)."""
STREAM_CHUNK_BYTES = 256 << 10


async def handle(call: Call) -> Chunks:
    header = call.header
    request = fetch_request(call.request())
    if fetch_rules.session_id(request) != 0:
        return call.answered(fetch_rules.session_not_found(response_type(ApiKey.FETCH, header.api_version)))
    plain = fetch_rules.sessionless(request)
    served = await _under_grants(call, plain)
    if served is not None:
        return call.answered(served)
    payload = call.payload
    if plain is not request:
        payload = b"".join(encode_request(header, plain, header.correlation_id)[1:])
    sent_at = time.monotonic()
    response = await call.roundtrip(payload, streamer=_streamer(call))
    if response is STREAMED:
        return []
    body = fetch_response(call.response(response))
    changed = fetch_rules.session_id(body) != 0
    out_of_range = fetch_rules.out_of_range(body)
    if out_of_range:
        answers = await _tier_answers(call, plain, body, out_of_range, sent_at=sent_at)
        if answers:
            body = fetch_rules.with_answers(body, answers)
            changed = True
    rewritten = rewrite_addresses(ApiKey.FETCH, body, call.ctx.rule)
    if rewritten.brokers:
        await call.ctx.learned(rewritten.brokers, False)
        body, changed = fetch_response(rewritten.body), True
    if not changed:
        return call.passed(response)
    return call.answered(fetch_rules.without_session(body))


async def _under_grants(call: Call, request: FetchRequest) -> FetchResponse | None:
    """The whole response to a sessionless fetch from the tier alone, when live grants cover every
    partition it names below the broker's log start; None when the broker must be asked."""
    grants = call.conn.grants
    wanted = fetch_rules.wanted(request)
    granted = grants.covers(((k, w.offset) for k, w in wanted.items()), time.monotonic())
    if granted is None:
        return None
    body = fetch_rules.unanswered(response_type(ApiKey.FETCH, call.header.api_version), request)
    answers = await _tier_answers(call, request, body, list(wanted), granted=granted)
    if len(answers) != len(wanted):  # the tier no longer holds one of them: the broker decides
        for key in wanted:
            grants.revoke(key)
        return None
    call.ctx.metrics.granted_fetches.inc()
    return fetch_rules.with_answers(body, answers)


async def _tier_answers(
    call: Call,
    request: FetchRequest,
    response: FetchResponse,
    keys: list[fetch_rules.PartitionKey],
    *,
    sent_at: float | None = None,
    granted: Mapping[Hashable, Grant] | None = None,
) -> dict[fetch_rules.PartitionKey, fetch_rules.TierAnswer]:
    """Tier answers for the partitions ``keys`` of ``response`` (answered OFFSET_OUT_OF_RANGE by the
    broker to a fetch sent at ``sent_at``, each earning a grant; or covered by ``granted``)."""
    ctx, conn = call.ctx, call.conn
    wanted = fetch_rules.wanted(request)
    used = fetch_rules.records_bytes(response)
    committed = request.isolation_level == READ_COMMITTED
    slices: dict[fetch_rules.PartitionKey, tuple[TopicPartitionId, TierSlice]] = {}
    failed: dict[fetch_rules.PartitionKey, ErrorCode] = {}
    for key in keys:
        want = wanted.get(key)
        try:
            tp = await conn.queries.tier_partition(call.upstream, key[0], key[1])
        except TierkeeperError as exc:  # the tier's listing failed: retriable, never "not tiered"
            log.error("looking up %s in the remote tier failed: %s", key, exc)
            ctx.metrics.tier_partitions.labels(outcome="error").inc()
            failed[key] = ErrorCode.kafka_storage_error
            continue
        if want is None:
            continue
        if tp is None:
            # Logged: the client is about to reset its position, and an operator asks why.
            log.info("%s offset %d: out of range at the broker and the topic is not tiered", key, want.offset)
            ctx.metrics.tier_partitions.labels(outcome="not_tiered").inc()
            continue
        if granted is not None and granted[key].incarnation != tp.topic_id:
            continue  # the topic was recreated since the grant: not this incarnation's history
        budget = max(0, min(want.max_bytes, request.max_bytes - used))
        started = time.perf_counter()
        try:
            found = await conn.tier.read(key, tp, want.offset, budget, min_one=used == 0, committed=committed)
        except TierkeeperError as exc:
            log.error("tier read of %s at offset %d failed: %s", tp, want.offset, exc)
            ctx.metrics.tier_partitions.labels(outcome="error").inc()
            failed[key] = ErrorCode.kafka_storage_error
            continue
        finally:
            ctx.metrics.remote_read_seconds.observe(time.perf_counter() - started)
        if found is None:
            log.info("%s offset %d: out of range at the broker and not held by the tier", tp, want.offset)
            ctx.metrics.tier_partitions.labels(outcome="not_tiered").inc()
            continue  # the tier does not hold it either: the broker's OFFSET_OUT_OF_RANGE stands
        slices[key] = (tp, found)
        used += len(found.records)
    if not slices and not failed:
        return {}
    marks = await conn.queries.watermarks(call.upstream, [tp for tp, _ in slices.values()])
    answers: dict[fetch_rules.PartitionKey, fetch_rules.TierAnswer] = {}
    for key, code in failed.items():
        answers[key] = _error_answer(code)
    for key, (tp, found) in slices.items():
        mark = marks.get((tp.topic, tp.partition))
        if isinstance(mark, ErrorCode):
            answers[key] = _error_answer(mark)
            continue
        assert mark is not None
        answers[key] = fetch_rules.TierAnswer(
            records=found.records,
            high_watermark=mark.high_watermark,
            last_stable_offset=mark.last_stable_offset,
            log_start_offset=found.log_start_offset,
            aborted=found.aborted if committed else None,
        )
        want = wanted[key]
        if sent_at is not None and want.offset < mark.local_start:
            conn.grants.grant(key, sent_at, mark.local_start, tp.topic_id)
        ctx.metrics.tier_served.inc()
        ctx.metrics.tier_bytes.inc(len(found.records))
    return answers


def _error_answer(code: ErrorCode) -> fetch_rules.TierAnswer:
    return fetch_rules.TierAnswer(
        records=None, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, aborted=None, error=code
    )


def _streamer(call: Call) -> Streamer:
    """Cut-through for a large Fetch response the gateway has nothing to change in: when it is this
    response's turn (every earlier response written, the writer waiting for this one), its bytes go to
    the client as they arrive instead of after the whole response has (storage_core/gateway/
    fetch_stream.py decides from its first bytes). A response that stops half-way (the broker died)
    leaves the client a frame shorter than its size and a closed connection, never a whole answer."""
    version = call.header.api_version
    writer = call.conn.writer

    async def stream(size: int, reader: asyncio.StreamReader) -> bytes | None:
        if not call.its_turn():
            return b""
        if size < STREAM_MIN_BYTES:
            return await call.pass_whole(size, reader)
        head = await reader.readexactly(min(size, STREAM_HEAD_BYTES))
        try:
            plain = plain_fetch(version, head)
        except NeedMore:  # a partition header longer than the first bytes read: stored and forwarded
            return head
        if plain is None or plain.records_end > size or len(head) > plain.records_end:
            return head
        writer.write(SIZE.pack(size + 4) + CORRELATION_ID.pack(call.header.correlation_id) + head)
        left = plain.records_end - len(head)
        while left > 0:
            chunk = await reader.read(min(left, STREAM_CHUNK_BYTES))
            if not chunk:
                raise asyncio.IncompleteReadError(b"", left)
            writer.write(chunk)
            left -= len(chunk)
            await writer.drain()
        tail = await reader.readexactly(size - plain.records_end)
        if not tail_is_plain(version, tail):
            # Addresses to rewrite after records already sent (no broker does this for an error-free
            # partition): the client gets a cut frame and a closed connection, never an unrewritten one.
            raise ProtocolError("a streamed Fetch response ended with NodeEndpoints; closing the client")
        writer.write(tail)
        await writer.drain()
        call.ctx.metrics.passthrough_bytes.inc(size + 4)
        call.ctx.metrics.streamed_responses.inc()
        return None

    return stream
