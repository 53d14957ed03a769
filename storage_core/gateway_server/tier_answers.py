"""The gateway's own answers on one client connection: Fetch and ListOffsets from the tier, and the requests
the gateway sends the broker itself (on the client's connection) to make them.

The session forwards; this module decides what the tier adds. A partition is answered from the tier only
under the broker's authorization on this connection: its OFFSET_OUT_OF_RANGE to the client's fetch, or a
grant such an answer earned a moment ago (storage_core/gateway/grants.py: a fetch wholly below the broker's
log start is then answered without a broker round trip, for at most ``Limits.grant_s``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import logging
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.errors import TierkeeperError
from storage_core.gateway import fetch as fetch_rules
from storage_core.gateway import offsets as offset_rules
from storage_core.gateway.grants import Grant, Grants
from storage_core.gateway.history import TierSlice, TimestampHit
from storage_core.gateway.protocol import (
    API_VERSIONS,
    RequestHeader,
    decode_response,
    encode_request,
    request_type,
    response_type,
)
from storage_core.gateway.ranges import NotReady
from storage_core.gateway.versions import negotiated
from storage_core.gateway_server.context import GatewayContext, kafka_topic_id
from storage_core.gateway_server.upstream import Upstream, UpstreamError
from storage_core.remote.layout import TopicPartitionId

log = logging.getLogger("tierkeeper.gateway")

FETCH, LIST_OFFSETS, METADATA = 1, 2, 3
READ_COMMITTED = 1
MAX_PREPARED = 4
"""Answers read ahead per client connection (each at most the partition's fetch limit, 1 MiB by default)."""
PREPARED_FOR_S = 5.0
"""A prepared answer not asked for within this long is read again (a client that paused; its memory)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Marks:
    """What the broker said of a partition on this connection, for a tier answer."""

    at: float
    high_watermark: int
    last_stable_offset: int
    local_start: int
    """The broker's own log start (below it the tier answers)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Prepared:
    read: _Read
    answer: asyncio.Future[TierSlice | None]
    at: float
    on_loop: bool
    """Computed on the event loop (then followed by another when used)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Read:
    """One partition's tier read, as :meth:`TierHistory.read` takes it."""

    tp: TopicPartitionId
    offset: int
    budget: int
    min_one: bool
    committed: bool


class TierAnswers:
    """The tier's part of one client connection's answers (its grants and marks die with it)."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self.grants = Grants(ctx.limits.grant_s)
        self._marks: dict[tuple[str, int], Marks] = {}
        self._prepared: dict[fetch_rules.PartitionKey, _Prepared] = {}
        self._following: dict[fetch_rules.PartitionKey, _Read] = {}
        """The reads :meth:`speculate` computes next."""

    # ---- Fetch ----------------------------------------------------------------------------------
    async def fetch_under_grants(self, upstream: Upstream, version: int, request: Any) -> Any | None:
        """The whole response to a sessionless fetch from the tier alone, when live grants cover every
        partition it names below the broker's log start; None when the broker must be asked."""
        wanted = fetch_rules.wanted(request)
        granted = self.grants.covers(((k, w.offset) for k, w in wanted.items()), time.monotonic())
        if granted is None:
            return None
        body = fetch_rules.unanswered(response_type(FETCH, version), request)
        answers = await self.fetch_answers(upstream, request, body, list(wanted), granted=granted)
        if len(answers) != len(wanted):  # the tier no longer holds one of them: the broker decides
            for key in wanted:
                self.grants.revoke(key)
            return None
        self.ctx.metrics.granted_fetches.inc()
        return fetch_rules.with_answers(body, answers)

    async def fetch_answers(
        self,
        upstream: Upstream,
        request: Any,
        response: Any,
        keys: list[fetch_rules.PartitionKey],
        *,
        sent_at: float | None = None,
        granted: dict[Any, Grant] | None = None,
    ) -> dict[fetch_rules.PartitionKey, fetch_rules.TierAnswer]:
        """Tier answers for the partitions ``keys`` of ``response`` (answered OFFSET_OUT_OF_RANGE by the
        broker to a fetch sent at ``sent_at``, each earning a grant; or covered by ``granted``)."""
        wanted = fetch_rules.wanted(request)
        used = fetch_rules.records_bytes(response)
        committed = request.isolation_level == READ_COMMITTED
        slices: dict[fetch_rules.PartitionKey, tuple[TopicPartitionId, TierSlice | None]] = {}
        failed: dict[fetch_rules.PartitionKey, ErrorCode] = {}
        for key in keys:
            want = wanted.get(key)
            try:
                tp = await self._tier_partition(upstream, key[0], key[1])
            except TierkeeperError as exc:  # the tier's listing failed: retriable, never "not tiered"
                log.error("looking up %s in the remote tier failed: %s", key, exc)
                self.ctx.metrics.tier_partitions.labels(outcome="error").inc()
                failed[key] = ErrorCode.kafka_storage_error
                continue
            if want is None:
                continue
            if tp is None:
                # Logged: the client is about to reset its position, and an operator asks why.
                log.info(
                    "%s offset %d: out of range at the broker and the topic is not tiered", key, want.offset
                )
                self.ctx.metrics.tier_partitions.labels(outcome="not_tiered").inc()
                continue
            if granted is not None and granted[key].incarnation != tp.topic_id:
                continue  # the topic was recreated since the grant: not this incarnation's history
            budget = max(0, min(want.max_bytes, request.max_bytes - used))
            started = time.perf_counter()
            try:
                found = await self._read(key, _Read(tp, want.offset, budget, used == 0, committed))
            except TierkeeperError as exc:
                log.error("tier read of %s at offset %d failed: %s", tp, want.offset, exc)
                self.ctx.metrics.tier_partitions.labels(outcome="error").inc()
                failed[key] = ErrorCode.kafka_storage_error
                continue
            finally:
                self.ctx.metrics.remote_read_seconds.observe(time.perf_counter() - started)
            assert found is None or isinstance(found, TierSlice)
            if found is None:
                log.info("%s offset %d: out of range at the broker and not held by the tier", tp, want.offset)
                self.ctx.metrics.tier_partitions.labels(outcome="not_tiered").inc()
                continue  # the tier does not hold it either: the broker's OFFSET_OUT_OF_RANGE stands
            slices[key] = (tp, found)
            used += len(found.records)
        if not slices and not failed:
            return {}
        marks = await self._watermarks(upstream, [tp for tp, _ in slices.values()])
        answers: dict[fetch_rules.PartitionKey, fetch_rules.TierAnswer] = {}
        for key, code in failed.items():
            answers[key] = _error_answer(code)
        for key, (tp, found) in slices.items():
            assert found is not None
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
                self.grants.grant(key, sent_at, mark.local_start, tp.topic_id)
            self.ctx.metrics.tier_served.inc()
            self.ctx.metrics.tier_bytes.inc(len(found.records))
        return answers

    async def _read(self, key: fetch_rules.PartitionKey, read: _Read) -> TierSlice | None:
        """The tier's answer to ``read``, computed ahead when it could be (a consumer reading history asks
        next for the offset after the batches it was just served, with the same limits), else on the event
        loop when memory holds it, else on a thread.

        Ahead of the ask: after an answer computed on the event loop, the next one is computed there too,
        once this one has been written to the client (:meth:`speculate`), while the client reads it and
        asks again; after a miss, the next one is read on a thread meanwhile. A thread's answer is not
        followed by another thread's, or the partition would stay on threads (each hand-off waits for the
        GIL) after the source has caught up. At most ``MAX_PREPARED`` partitions of a connection have one."""
        prepared = self._prepared.pop(key, None)
        if prepared is not None and prepared.read == read and time.monotonic() - prepared.at < PREPARED_FOR_S:
            found = await prepared.answer
            if prepared.on_loop:
                self._follow(key, read, found)
            return found
        try:
            found = self._read_now(read)
        except NotReady:
            pass
        else:
            self._follow(key, read, found)
            return found
        found = await self._submit(read)
        if found is not None and found.records:
            after = dataclasses.replace(read, offset=found.upper_offset)
            self._keep(key, after, self._submit(after), on_loop=False)
        return found

    def speculate(self) -> None:
        """Compute on the event loop the answers :meth:`_read` expects to be asked next. Called once an
        answer has been written (its client is busy reading it): what memory holds is ready when the
        client asks; what it does not is read on a thread meanwhile. A failure is left for the real ask
        to meet (and report) again."""
        following, self._following = self._following, {}
        for key, read in following.items():
            if key in self._prepared:
                continue
            future: asyncio.Future[TierSlice | None] = asyncio.get_running_loop().create_future()
            try:
                future.set_result(self._read_now(read))
            except NotReady:
                self._keep(key, read, self._submit(read), on_loop=False)
                continue
            except Exception:  # noqa: BLE001 - the real ask reads again and reports what it meets
                continue
            self._keep(key, read, future, on_loop=True)

    def _follow(self, key: fetch_rules.PartitionKey, read: _Read, found: TierSlice | None) -> None:
        if found is not None and found.records:
            self._following[key] = dataclasses.replace(read, offset=found.upper_offset)

    def _keep(
        self,
        key: fetch_rules.PartitionKey,
        read: _Read,
        answer: asyncio.Future[TierSlice | None],
        *,
        on_loop: bool,
    ) -> None:
        self._prepared[key] = _Prepared(read, answer, time.monotonic(), on_loop)
        while len(self._prepared) > MAX_PREPARED:  # memory: a few partitions' answers per connection
            del self._prepared[next(iter(self._prepared))]

    def _read_now(self, read: _Read) -> TierSlice | None:
        return self.ctx.history.read(
            read.tp,
            read.offset,
            read.budget,
            min_one=read.min_one,
            read_committed=read.committed,
            nowait=True,
        )

    def _submit(self, read: _Read) -> asyncio.Future[TierSlice | None]:
        future = asyncio.get_running_loop().run_in_executor(
            self.ctx.tier_pool,
            functools.partial(
                self.ctx.history.read,
                read.tp,
                read.offset,
                read.budget,
                min_one=read.min_one,
                read_committed=read.committed,
            ),
        )
        # A prepared answer nobody asks for (the client went elsewhere) must not log its failure.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        return future

    async def _tier_partition(
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
            name = await asyncio.get_running_loop().run_in_executor(
                self.ctx.tier_pool, self.ctx.history.topic_name, tid
            )
        if name is None or (isinstance(topic, str) and name != topic):
            return None
        return TopicPartitionId(name, tid, partition)

    # ---- ListOffsets ----------------------------------------------------------------------------
    async def list_offsets(self, upstream: Upstream, request: Any, response: Any) -> Any:
        asked = offset_rules.questions(request, response)
        if not asked:
            return response
        answers: dict[offset_rules.Question, offset_rules.TierOffset | None] = {}
        errors: dict[tuple[str, int], ErrorCode] = {}
        for name, partition, ts in asked:
            try:
                tp = await self._tier_partition(upstream, name, partition)
            except TierkeeperError as exc:
                log.error("looking up %s-%d in the remote tier failed: %s", name, partition, exc)
                errors[(name, partition)] = ErrorCode.kafka_storage_error
                continue
            if tp is None:
                if ts == offset_rules.LATEST_TIERED:
                    answers[(name, partition, ts)] = None
                continue
            try:
                found = await asyncio.get_running_loop().run_in_executor(
                    self.ctx.tier_pool, _tier_offset, self.ctx.history, tp, ts
                )
            except TierkeeperError as exc:
                log.error("tier offset lookup of %s (timestamp %d) failed: %s", tp, ts, exc)
                errors[(name, partition)] = ErrorCode.kafka_storage_error
                continue
            answers[(name, partition, ts)] = found
        body = offset_rules.with_tier(response, answers)
        if errors:
            body = offset_rules.with_errors(body, errors)
        return body

    # ---- the gateway's own requests on this connection -------------------------------------------
    def learn_topic_ids(self, body: Any) -> None:
        for t in body.topics:
            topic_id = getattr(t, "topic_id", None)
            if t.name and topic_id is not None and topic_id.int != 0 and t.error_code == ErrorCode.none:
                self.ctx.topic_ids[t.name] = topic_id

    async def _ensure_versions(self, upstream: Upstream) -> None:
        """The broker's ApiVersions on this connection, asked by the gateway when the client did not: the
        protocol does not require ApiVersions, and a client that went straight to Fetch must still get its
        tier answers (tests/gateway/test_gateway_bad_input.py)."""
        if upstream.broker_versions:
            return
        from kio.schema.api_versions.v3.request import ApiVersionsRequest

        header = RequestHeader(API_VERSIONS, 3, 0, "tierkeeper-gateway", 0)
        body = ApiVersionsRequest(client_software_name="tierkeeper-gateway", client_software_version="1")
        response = await self._await(upstream, upstream.send_chunks(encode_request(header, body, 0)))
        decoded = decode_response(API_VERSIONS, 3, response)
        if decoded.error_code == ErrorCode.none and not upstream.broker_versions:
            upstream.broker_versions = {a.api_key: (a.min_version, a.max_version) for a in decoded.api_keys}

    async def _await(self, upstream: Upstream, future: asyncio.Future[bytes]) -> bytes:
        """The answer to one of the gateway's own requests, within the request timeout."""
        await upstream.drain()
        try:
            return await asyncio.wait_for(future, self.ctx.limits.request_timeout_s)
        except TimeoutError:
            raise UpstreamError(
                f"broker {upstream.address}: no answer within {self.ctx.limits.request_timeout_s:g} s"
            ) from None

    async def _ask(self, upstream: Upstream, api_key: int, body_fields: dict[str, Any]) -> tuple[int, Any]:
        await self._ensure_versions(upstream)
        version = negotiated(upstream.broker_versions, api_key)
        if version is None:
            raise UpstreamError(f"broker {upstream.address}: no common version of API {api_key}")
        cls = request_type(api_key, version)
        names = {f.name for f in dataclasses.fields(cls)}
        body = cls(**{k: v for k, v in body_fields.items() if k in names})  # fields of other versions dropped
        header = RequestHeader(api_key, version, 0, "tierkeeper-gateway", 0)
        response = await self._await(upstream, upstream.send_chunks(encode_request(header, body, 0)))
        return version, decode_response(api_key, version, response)

    async def _ask_topic_ids(self, upstream: Upstream, names: list[str]) -> None:
        await self._ensure_versions(upstream)
        version = negotiated(upstream.broker_versions, METADATA)
        if version is None or version < 10:
            return
        module = __import__(request_type(METADATA, version).__module__, fromlist=["MetadataRequestTopic"])
        fields: dict[str, Any] = {
            "topics": tuple(module.MetadataRequestTopic(topic_id=None, name=n) for n in names),
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        _, body = await self._ask(upstream, METADATA, fields)
        self.learn_topic_ids(body)

    async def _list_offsets_query(
        self, upstream: Upstream, tps: list[TopicPartitionId], timestamp: int, isolation: int
    ) -> dict[tuple[str, int], int | ErrorCode]:
        await self._ensure_versions(upstream)
        version = negotiated(upstream.broker_versions, LIST_OFFSETS)
        if version is None:
            raise UpstreamError(f"broker {upstream.address}: no common ListOffsets version")
        module = __import__(request_type(LIST_OFFSETS, version).__module__, fromlist=["ListOffsetsTopic"])
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = tuple(
            module.ListOffsetsTopic(
                name=name,
                partitions=tuple(
                    module.ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in parts
                ),
            )
            for name, parts in by_topic.items()
        )
        fields: dict[str, Any] = {
            "replica_id": -1,
            "isolation_level": isolation,
            "topics": topics,
            "timeout": datetime.timedelta(seconds=30),
        }
        _, body = await self._ask(upstream, LIST_OFFSETS, fields)
        out: dict[tuple[str, int], int | ErrorCode] = {}
        for t in body.topics:
            for p in t.partitions:
                out[(t.name, p.partition_index)] = (
                    p.offset if p.error_code == ErrorCode.none else _retriable(p.error_code)
                )
        return out

    async def _watermarks(
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
                self._list_offsets_query(upstream, missing, offset_rules.LATEST, 0),
                self._list_offsets_query(upstream, missing, offset_rules.LATEST, READ_COMMITTED),
                self._list_offsets_query(upstream, missing, offset_rules.EARLIEST, 0),
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


def _tier_offset(history: Any, tp: TopicPartitionId, ts: int) -> offset_rules.TierOffset | None:
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


def _retriable(code: ErrorCode) -> ErrorCode:
    """A broker error on the gateway's own request, as the partition's answer: retriable ones as they are
    (the client refreshes metadata and retries); anything else as KAFKA_STORAGE_ERROR, which the client
    retries too, never as an error that would move its position."""
    return code if code.retriable else ErrorCode.kafka_storage_error


def _error_answer(code: ErrorCode) -> fetch_rules.TierAnswer:
    return fetch_rules.TierAnswer(
        records=None, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, aborted=None, error=code
    )
