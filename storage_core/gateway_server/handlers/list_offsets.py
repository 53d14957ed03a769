"""ListOffsets: the broker answers first (its authorization and errors stand), then the tier's part of the
partitions it answered without an error (storage_core/gateway/offsets.py says which questions and when the
tier's answer is Kafka's answer for a tiered log)."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from storage_core.errors import TierkeeperError
from storage_core.gateway import offsets as offset_rules
from storage_core.gateway.history import TierHistory, TimestampHit
from storage_core.gateway.messages import list_offsets_request, list_offsets_response
from storage_core.gateway.protocol import Chunks
from storage_core.gateway_server.call import Call
from storage_core.remote.layout import TopicPartitionId

log = logging.getLogger("tierkeeper.gateway")


async def handle(call: Call) -> Chunks:
    response = await call.roundtrip()
    broker = list_offsets_response(call.response(response))
    asked = offset_rules.questions(list_offsets_request(call.request()), broker)
    if not asked:
        return call.passed(response)
    answers: dict[offset_rules.Question, offset_rules.TierOffset | None] = {}
    errors: dict[tuple[str, int], ErrorCode] = {}
    for name, partition, ts in asked:
        try:
            tp = await call.conn.queries.tier_partition(call.upstream, name, partition)
        except TierkeeperError as exc:
            log.error("looking up %s-%d in the remote tier failed: %s", name, partition, exc)
            errors[(name, partition)] = ErrorCode.kafka_storage_error
            continue
        if tp is None:
            if ts == offset_rules.LATEST_TIERED:
                answers[(name, partition, ts)] = None
            continue
        try:
            found = await call.ctx.run_tier(_tier_offset, call.ctx.history, tp, ts)
        except TierkeeperError as exc:
            log.error("tier offset lookup of %s (timestamp %d) failed: %s", tp, ts, exc)
            errors[(name, partition)] = ErrorCode.kafka_storage_error
            continue
        answers[(name, partition, ts)] = found
    body = offset_rules.with_tier(broker, answers)
    if errors:
        body = offset_rules.with_errors(body, errors)
    if body is broker:
        return call.passed(response)
    return call.answered(body)


def _tier_offset(history: TierHistory, tp: TopicPartitionId, ts: int) -> offset_rules.TierOffset | None:
    """The tier's answer to one ListOffsets question (on a tier thread: it may read the store)."""
    if ts == offset_rules.EARLIEST:
        start = history.earliest(tp)
        return None if start is None else offset_rules.TierOffset(start, -1, history.epoch_at(tp, start))
    if ts == offset_rules.LATEST_TIERED:
        end = history.latest_tiered(tp)
        return None if end is None else offset_rules.TierOffset(end, -1, history.epoch_at(tp, end))
    hit: TimestampHit | None = (
        history.latest_timestamp(tp)
        if ts == offset_rules.MAX_TIMESTAMP
        else history.offset_for_timestamp(tp, ts)
    )
    return None if hit is None else offset_rules.TierOffset(hit.offset, hit.timestamp, hit.leader_epoch)
