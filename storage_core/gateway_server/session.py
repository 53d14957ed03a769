"""One client connection: its frames in, its upstream broker connection, its responses out in order.

Every request is forwarded at once to the broker this listener stands for (the bootstrap listener: the
first bootstrap broker that answers), over a connection that belongs to this client connection alone, so
SASL passes through and the broker authenticates and authorizes the client itself. Requests are handled
concurrently (a client may pipeline) and answered in the order they came, as Kafka clients expect.
Frames of APIs nobody intercepts are forwarded without decoding. Whatever goes wrong with a frame or the
broker connection closes this connection only: the client reconnects, the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import functools
import logging
import ssl
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.errors import TierkeeperError
from storage_core.gateway import fetch as fetch_rules
from storage_core.gateway import offsets as offset_rules
from storage_core.gateway.addresses import ADDRESS_APIS, rewrite_addresses
from storage_core.gateway.history import TierSlice, TimestampHit
from storage_core.gateway.protocol import (
    API_VERSIONS,
    Chunks,
    ProtocolError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    framed_with_correlation_id,
    knows,
    produce_acks,
    read_request_header,
    request_type,
    supported_versions,
)
from storage_core.gateway.versions import negotiated, offered_versions
from storage_core.gateway_server.context import GatewayContext, kafka_topic_id
from storage_core.gateway_server.frames import read_frame, write_chunks
from storage_core.gateway_server.upstream import Upstream, UpstreamError
from storage_core.remote.layout import TopicPartitionId

log = logging.getLogger("tierkeeper.gateway")

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
INTERCEPTED = frozenset({PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS}) | ADDRESS_APIS
READ_COMMITTED = 1


class ClientSession:
    def __init__(
        self,
        ctx: GatewayContext,
        node_id: int | None,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.ctx = ctx
        self.node_id = node_id
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self._upstream: Upstream | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._order: asyncio.Queue[asyncio.Future[Chunks | None] | None] = asyncio.Queue()
        self._slots = asyncio.Semaphore(ctx.limits.max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        self._hwm: dict[tuple[str, int, int], tuple[float, int]] = {}
        self._stopping = False
        self._reading: asyncio.Task[None] | None = None

    # ---- the connection -------------------------------------------------------------------------
    async def run(self) -> None:
        self.ctx.metrics.connections.inc()
        writer_task = asyncio.get_running_loop().create_task(self._write_responses())
        self._reading = asyncio.get_running_loop().create_task(self._read_requests())
        try:
            await self._reading
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the session itself is being cancelled (shutdown past its grace)
            # stop_reading(): no new request; the ones in flight are still answered below
        except ProtocolError as exc:
            self.ctx.metrics.client_errors.inc()
            log.warning("closing client %s: %s", self.peer, exc)
        except (OSError, ssl.SSLError) as exc:
            log.info("client %s: %s", self.peer, exc)
        finally:
            await self._order.put(None)
            with contextlib.suppress(BaseException):
                await writer_task
            for task in list(self._tasks):
                task.cancel()
            if self._upstream is not None:
                await self._upstream.close()
            self.writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await self.writer.wait_closed()
            self.ctx.metrics.connections.dec()

    def stop_reading(self) -> None:
        """Take no new request; the ones in flight are answered, then the connection closes."""
        self._stopping = True
        if self._reading is not None:
            self._reading.cancel()

    async def _read_requests(self) -> None:
        while not self._stopping:
            await self._slots.acquire()
            payload = await read_frame(self.reader, self.ctx.limits.max_frame_bytes)
            if payload is None or self._stopping:
                self._slots.release()
                return
            header = read_request_header(payload)
            self.ctx.metrics.request(header.api_key)
            slot: asyncio.Future[Chunks | None] = asyncio.get_running_loop().create_future()
            await self._order.put(slot)
            task = asyncio.get_running_loop().create_task(self._handle(header, payload, slot))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write_responses(self) -> None:
        while True:
            slot = await self._order.get()
            if slot is None:
                return
            try:
                chunks = await slot
            except (TimeoutError, UpstreamError, ProtocolError, TierkeeperError) as exc:
                if isinstance(exc, UpstreamError):
                    self.ctx.metrics.upstream_errors.inc()
                log.warning("closing client %s: %s", self.peer, exc or type(exc).__name__)
                self._stopping = True
                self.writer.close()
                return
            finally:
                self._slots.release()
            if chunks:
                write_chunks(self.writer, chunks)
                await self.writer.drain()

    async def _handle(
        self, header: RequestHeader, payload: bytes, slot: asyncio.Future[Chunks | None]
    ) -> None:
        try:
            # No deadline of the gateway's own on a client's request: a JoinGroup waits at the broker for as
            # long as the rebalance takes, and the client's own request timeout covers the rest.
            result = await self._answer(header, payload)
        except asyncio.CancelledError:
            if not slot.done():
                _fail_quietly(slot, UpstreamError("connection closing"))
            raise
        except Exception as exc:  # any failure closes this client's connection, and nothing else
            if not slot.done():
                _fail_quietly(
                    slot,
                    exc
                    if isinstance(exc, (UpstreamError, ProtocolError))
                    else UpstreamError(f"{type(exc).__name__}: {exc}"),
                )
            if not isinstance(exc, (UpstreamError, ProtocolError, asyncio.TimeoutError)):
                log.exception("request %s v%s of %s failed", header.api_key, header.api_version, self.peer)
            return
        if not slot.done():
            slot.set_result(result)

    async def _upstream_conn(self) -> Upstream:
        async with self._connecting:
            if self._upstream is not None and not self._upstream.closed:
                return self._upstream
            if self._upstream is not None:
                raise UpstreamError(f"broker {self._upstream.address}: the connection closed")
            targets = (
                self.ctx.bootstrap
                if self.node_id is None
                else [self.ctx.brokers[self.node_id]]
                if self.node_id in self.ctx.brokers
                else []
            )
            if not targets:
                raise UpstreamError(f"broker {self.node_id}: its address is not known (yet)")
            errors = []
            for address in targets:
                try:
                    self._upstream = await Upstream.connect(
                        address,
                        self.ctx.upstream_tls,
                        timeout_s=self.ctx.limits.connect_timeout_s,
                        max_frame_bytes=self.ctx.limits.max_frame_bytes,
                    )
                    self._watch(self._upstream)
                    return self._upstream
                except UpstreamError as exc:
                    errors.append(str(exc))
            raise UpstreamError("; ".join(errors))

    def _watch(self, upstream: Upstream) -> None:
        """When the broker ends its connection (idle timeout, restart), end the client's too, as a direct
        connection would end: the client reconnects at once instead of finding out on its next request."""

        async def watch() -> None:
            await upstream.gone.wait()
            self.stop_reading()

        task = asyncio.get_running_loop().create_task(watch())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- requests -------------------------------------------------------------------------------
    async def _answer(self, header: RequestHeader, payload: bytes) -> Chunks | None:
        upstream = await self._upstream_conn()
        api = header.api_key
        if api == API_VERSIONS and not knows(api, header.api_version):
            return self._unsupported_api_versions(header)
        if api not in INTERCEPTED or not knows(api, header.api_version):
            return await self._forward(upstream, header, payload)
        if api == PRODUCE:
            if produce_acks(header, payload) == 0:
                upstream.send(payload, expect_response=False)
                await upstream.drain()
                return None
            if header.api_version < 10:  # no node endpoints before v10
                return await self._forward(upstream, header, payload)
        if api == FETCH:
            return await self._fetch(upstream, header, payload)
        response = await self._roundtrip(upstream, payload)
        body = decode_response(api, header.api_version, response)
        changed = False
        if api == API_VERSIONS:
            if body.error_code == ErrorCode.none:
                upstream.broker_versions = {a.api_key: (a.min_version, a.max_version) for a in body.api_keys}
            body, changed = offered_versions(body), True
        elif api == LIST_OFFSETS:
            before = body
            body = await self._list_offsets(upstream, decode_request(header, payload), body)
            changed = body is not before
        if api == METADATA:
            self._learn_topic_ids(body)
        if api in ADDRESS_APIS:
            rewritten = rewrite_addresses(api, body, self.ctx.rule)
            await self.ctx.learned(rewritten.brokers, rewritten.complete)
            changed = changed or rewritten.body is not body
            body = rewritten.body
        if not changed:
            return self._passed(header, response)
        return encode_response(api, header.api_version, header.correlation_id, body)

    async def _forward(self, upstream: Upstream, header: RequestHeader, payload: bytes) -> Chunks:
        return self._passed(header, await self._roundtrip(upstream, payload))

    async def _roundtrip(self, upstream: Upstream, payload: bytes) -> bytes:
        future = upstream.send(payload)
        assert future is not None
        await upstream.drain()
        return await future

    def _passed(self, header: RequestHeader, response: bytes) -> Chunks:
        self.ctx.metrics.passthrough_bytes.inc(len(response))
        return framed_with_correlation_id(response, header.correlation_id, response=True)

    def _unsupported_api_versions(self, header: RequestHeader) -> Chunks:
        """ApiVersions of a version the gateway cannot read: KIP-511's answer (v0, UNSUPPORTED_VERSION and
        the versions of ApiVersions it does know), so the client asks again in one of those."""
        from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
        from kio.static.primitive import i16

        low, high = supported_versions()[API_VERSIONS]
        body = ApiVersionsResponse(
            error_code=ErrorCode.unsupported_version,
            api_keys=(ApiVersion(api_key=i16(API_VERSIONS), min_version=i16(low), max_version=i16(high)),),
        )
        return encode_response(API_VERSIONS, 0, header.correlation_id, body)

    # ---- Fetch ----------------------------------------------------------------------------------
    async def _fetch(self, upstream: Upstream, header: RequestHeader, payload: bytes) -> Chunks:
        request = decode_request(header, payload)
        if fetch_rules.session_id(request) != 0:
            from storage_core.gateway.protocol import response_type

            body = fetch_rules.session_not_found(response_type(FETCH, header.api_version))
            return encode_response(FETCH, header.api_version, header.correlation_id, body)
        plain = fetch_rules.sessionless(request)
        if plain is not request:
            payload = b"".join(encode_request(header, plain, header.correlation_id)[1:])
        response = await self._roundtrip(upstream, payload)
        body = decode_response(FETCH, header.api_version, response)
        changed = fetch_rules.session_id(body) != 0
        out_of_range = fetch_rules.out_of_range(body)
        if out_of_range:
            answers = await self._tier_answers(upstream, plain, body, out_of_range)
            if answers:
                body = fetch_rules.with_answers(body, answers)
                changed = True
        rewritten = rewrite_addresses(FETCH, body, self.ctx.rule)
        if rewritten.brokers:
            await self.ctx.learned(rewritten.brokers, False)
            body, changed = rewritten.body, True
        if not changed:
            return self._passed(header, response)
        return encode_response(
            FETCH, header.api_version, header.correlation_id, fetch_rules.without_session(body)
        )

    async def _tier_answers(
        self,
        upstream: Upstream,
        request: Any,
        response: Any,
        keys: list[fetch_rules.PartitionKey],
    ) -> dict[fetch_rules.PartitionKey, fetch_rules.TierAnswer]:
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
            if want is None or tp is None:
                continue
            budget = max(0, min(want.max_bytes, request.max_bytes - used))
            started = time.perf_counter()
            try:
                found = await asyncio.get_running_loop().run_in_executor(
                    self.ctx.tier_pool,
                    functools.partial(
                        self.ctx.history.read,
                        tp,
                        want.offset,
                        budget,
                        min_one=used == 0,
                        read_committed=committed,
                    ),
                )
            except TierkeeperError as exc:
                log.error("tier read of %s at offset %d failed: %s", tp, want.offset, exc)
                self.ctx.metrics.tier_partitions.labels(outcome="error").inc()
                failed[key] = ErrorCode.kafka_storage_error
                continue
            finally:
                self.ctx.metrics.remote_read_seconds.observe(time.perf_counter() - started)
            assert found is None or isinstance(found, TierSlice)
            if found is None:
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
            hwm, lso = mark
            answers[key] = fetch_rules.TierAnswer(
                records=found.records,
                high_watermark=hwm,
                last_stable_offset=lso,
                log_start_offset=found.log_start_offset,
                aborted=found.aborted if committed else None,
            )
            self.ctx.metrics.tier_partitions.labels(outcome="served").inc()
            self.ctx.metrics.tier_bytes.inc(len(found.records))
        return answers

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
        name = await asyncio.get_running_loop().run_in_executor(
            self.ctx.tier_pool, self.ctx.history.topic_name, tid
        )
        if name is None or (isinstance(topic, str) and name != topic):
            return None
        return TopicPartitionId(name, tid, partition)

    # ---- the gateway's own requests on this connection -------------------------------------------
    def _learn_topic_ids(self, body: Any) -> None:
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
        self._learn_topic_ids(body)

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
    ) -> dict[tuple[str, int], tuple[int, int] | ErrorCode]:
        """High watermark and last stable offset of each partition, as the broker says on this connection
        (an OFFSET_OUT_OF_RANGE answer carries neither); reused for ``hwm_cache_s``."""
        now = time.monotonic()
        out: dict[tuple[str, int], tuple[int, int] | ErrorCode] = {}
        missing = []
        for tp in tps:
            hwm = self._hwm.get((tp.topic, tp.partition, 0))
            lso = self._hwm.get((tp.topic, tp.partition, 1))
            if (
                hwm
                and lso
                and now - hwm[0] < self.ctx.limits.hwm_cache_s
                and now - lso[0] < self.ctx.limits.hwm_cache_s
            ):
                out[(tp.topic, tp.partition)] = (hwm[1], lso[1])
            else:
                missing.append(tp)
        if missing:
            hwms, lsos = await asyncio.gather(
                self._list_offsets_query(upstream, missing, offset_rules.LATEST, 0),
                self._list_offsets_query(upstream, missing, offset_rules.LATEST, READ_COMMITTED),
            )
            for tp in missing:
                key = (tp.topic, tp.partition)
                hwm_v, lso_v = (
                    hwms.get(key, ErrorCode.unknown_topic_or_partition),
                    lsos.get(key, ErrorCode.unknown_topic_or_partition),
                )
                if isinstance(hwm_v, ErrorCode):
                    out[key] = hwm_v
                elif isinstance(lso_v, ErrorCode):
                    out[key] = lso_v
                else:
                    self._hwm[(tp.topic, tp.partition, 0)] = (now, hwm_v)
                    self._hwm[(tp.topic, tp.partition, 1)] = (now, lso_v)
                    out[key] = (hwm_v, lso_v)
        return out

    # ---- ListOffsets ----------------------------------------------------------------------------
    async def _list_offsets(self, upstream: Upstream, request: Any, response: Any) -> Any:
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


def _fail_quietly(future: asyncio.Future[Any], error: BaseException) -> None:
    """Fail a future that nobody may wait for any more (its connection is closing): whoever still awaits
    it gets the error, and asyncio does not log it as never retrieved."""
    future.set_exception(error)
    future.exception()  # marks it retrieved


def _tier_offset(history: Any, tp: TopicPartitionId, ts: int) -> offset_rules.TierOffset | None:
    if ts == offset_rules.EARLIEST:
        start = history.earliest(tp)
        return None if start is None else offset_rules.TierOffset(start, -1, history.epoch_at(tp, start))
    if ts == offset_rules.LATEST_TIERED:
        end = history.latest_tiered(tp)
        return None if end is None else offset_rules.TierOffset(end, -1, history.epoch_at(tp, end))
    hit: TimestampHit | None = history.offset_for_timestamp(tp, ts)
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
