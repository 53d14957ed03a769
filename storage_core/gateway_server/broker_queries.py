"""The gateway's own questions on one client connection, to make a tier answer: to the broker (ApiVersions,
Metadata for topic ids, ListOffsets for a partition's marks), sent on the client's authenticated connection
beside its requests, and to the tier's listing (which tiered incarnation a topic is).

Asking on the client's connection keeps the broker the judge: it answers the gateway's questions with the
client's principal, so a question the client could not ask itself gets an error, never an answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
import uuid
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from storage_core.gateway import fetch as fetch_rules
from storage_core.gateway import offsets as offset_rules
from storage_core.gateway.messages import api_versions_response, list_offsets_response, metadata_response
from storage_core.gateway.protocol import (
    ApiKey,
    RequestHeader,
    build_request,
    decode_response,
    encode_request,
)
from storage_core.gateway.versions import negotiated
from storage_core.gateway_server.context import GatewayContext, kafka_topic_id
from storage_core.gateway_server.upstream import Upstream, UpstreamError
from storage_core.remote.layout import TopicPartitionId

if TYPE_CHECKING:
    from storage_core.gateway.messages import MetadataResponse

CLIENT_ID = "tierkeeper-gateway"
READ_COMMITTED = 1
OWN_VERSIONS_VERSION = 3
"""The ApiVersions version the gateway asks in when the client did not ask (every Kafka 2.4+ broker)."""
LIST_OFFSETS_TIMEOUT = datetime.timedelta(seconds=30)


@dataclasses.dataclass(frozen=True, slots=True)
class Marks:
    """What the broker said of a partition on this connection, for a tier answer."""

    at: float
    high_watermark: int
    last_stable_offset: int
    local_start: int
    """The broker's own log start (below it the tier answers)."""


class BrokerQueries:
    """One client connection's questions (the marks it learned die with it)."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self._marks: dict[tuple[str, int], Marks] = {}

    # ---- which tiered incarnation ------------------------------------------------------------------
    async def tier_partition(
        self, upstream: Upstream, topic: fetch_rules.TopicKey, partition: int
    ) -> TopicPartitionId | None:
        """The tiered incarnation of a topic the request names (by id, or by name: then the live topic's
        id decides, so a recreated topic never gets its predecessor's history)."""
        topic_id: uuid.UUID | None
        if isinstance(topic, uuid.UUID):
            topic_id = topic
        else:
            topic_id = self.ctx.topic_ids.get(topic)
            if topic_id is None:
                await self._ask_topic_ids(upstream, [topic])
                topic_id = self.ctx.topic_ids.get(topic)
            if topic_id is None:
                return None
        tid = kafka_topic_id(topic_id)
        name = self.ctx.history.known_topic_name(tid)
        if name is None:
            name = await self.ctx.run_tier(self.ctx.history.topic_name, tid)
        if name is None or (isinstance(topic, str) and name != topic):
            return None
        return TopicPartitionId(name, tid, partition)

    def learn_topic_ids(self, body: MetadataResponse) -> None:
        for t in body.topics:
            topic_id = getattr(t, "topic_id", None)
            if t.name and topic_id is not None and topic_id.int != 0 and t.error_code == ErrorCode.none:
                self.ctx.topic_ids[t.name] = topic_id

    # ---- the broker's marks ---------------------------------------------------------------------------
    async def watermarks(
        self, upstream: Upstream, tps: list[TopicPartitionId]
    ) -> dict[tuple[str, int], Marks | ErrorCode]:
        """High watermark, last stable offset and the broker's log start of each partition, as the broker
        says on this connection (an OFFSET_OUT_OF_RANGE answer carries none of them); reused for
        ``hwm_cache_s``."""
        now = time.monotonic()
        out: dict[tuple[str, int], Marks | ErrorCode] = {}
        missing = []
        for tp in tps:
            known = self._marks.get((tp.topic, tp.partition))
            if known is not None and now - known.at < self.ctx.limits.hwm_cache_s:
                out[(tp.topic, tp.partition)] = known
            else:
                missing.append(tp)
        if missing:
            hwms, lsos, starts = await asyncio.gather(
                self._list_offsets(upstream, missing, offset_rules.LATEST, 0),
                self._list_offsets(upstream, missing, offset_rules.LATEST, READ_COMMITTED),
                self._list_offsets(upstream, missing, offset_rules.EARLIEST, 0),
            )
            for tp in missing:
                key = (tp.topic, tp.partition)
                values = [
                    found.get(key, ErrorCode.unknown_topic_or_partition) for found in (hwms, lsos, starts)
                ]
                error = next((v for v in values if isinstance(v, ErrorCode)), None)
                if error is not None:
                    out[key] = error
                    continue
                hwm_v, lso_v, start_v = (int(v) for v in values)
                self._marks[key] = out[key] = Marks(now, hwm_v, lso_v, start_v)
        return out

    # ---- the questions ----------------------------------------------------------------------------------
    async def _ask_topic_ids(self, upstream: Upstream, names: list[str]) -> None:
        await self._ensure_versions(upstream)
        version = negotiated(upstream.broker_versions, ApiKey.METADATA)
        if version is None or version < 10:  # no topic ids in Metadata before v10
            return
        body = await self._ask(
            upstream,
            ApiKey.METADATA,
            version,
            topics=[{"topic_id": None, "name": n} for n in names],
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        self.learn_topic_ids(metadata_response(body))

    async def _list_offsets(
        self, upstream: Upstream, tps: list[TopicPartitionId], timestamp: int, isolation: int
    ) -> dict[tuple[str, int], int | ErrorCode]:
        await self._ensure_versions(upstream)
        version = negotiated(upstream.broker_versions, ApiKey.LIST_OFFSETS)
        if version is None:
            raise UpstreamError(f"broker {upstream.address}: no common ListOffsets version")
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        body = await self._ask(
            upstream,
            ApiKey.LIST_OFFSETS,
            version,
            replica_id=-1,
            isolation_level=isolation,
            topics=[
                {"name": name, "partitions": [{"partition_index": p, "timestamp": timestamp} for p in parts]}
                for name, parts in by_topic.items()
            ],
            timeout=LIST_OFFSETS_TIMEOUT,
        )
        out: dict[tuple[str, int], int | ErrorCode] = {}
        for t in list_offsets_response(body).topics:
            for p in t.partitions:
                out[(t.name, p.partition_index)] = (
                    p.offset if p.error_code == ErrorCode.none else _retriable(p.error_code)
                )
        return out

    async def _ensure_versions(self, upstream: Upstream) -> None:
        """The broker's ApiVersions on this connection, asked by the gateway when the client did not: the
        protocol does not require ApiVersions, and a client that went straight to Fetch must still get its
        tier answers (tests/gateway/test_gateway_bad_input.py)."""
        if upstream.broker_versions:
            return
        body = await self._ask(
            upstream,
            ApiKey.API_VERSIONS,
            OWN_VERSIONS_VERSION,
            client_software_name=CLIENT_ID,
            client_software_version="1",
        )
        decoded = api_versions_response(body)
        if decoded.error_code == ErrorCode.none and not upstream.broker_versions:
            upstream.broker_versions = {a.api_key: (a.min_version, a.max_version) for a in decoded.api_keys}

    async def _ask(self, upstream: Upstream, api: ApiKey, version: int, **fields: object) -> ResponsePayload:
        """The broker's answer to one of the gateway's own requests, within the request timeout."""
        header = RequestHeader(api, version, 0, CLIENT_ID, 0)
        future = upstream.send_chunks(encode_request(header, build_request(api, version, **fields), 0))
        await upstream.drain()
        try:
            response = await asyncio.wait_for(future, self.ctx.limits.request_timeout_s)
        except TimeoutError:
            raise UpstreamError(
                f"broker {upstream.address}: no answer within {self.ctx.limits.request_timeout_s:g} s"
            ) from None
        return decode_response(api, version, response)


def _retriable(code: ErrorCode) -> ErrorCode:
    """A broker error on the gateway's own request, as the partition's answer: retriable ones as they are
    (the client refreshes metadata and retries); anything else as KAFKA_STORAGE_ERROR, which the client
    retries too, never as an error that would move its position."""
    return code if code.retriable else ErrorCode.kafka_storage_error
