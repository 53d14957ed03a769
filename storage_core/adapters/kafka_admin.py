"""Kafka Admin API calls the storage core needs (confluent-kafka), with errors translated.

Offsets: the last stable offset is ListOffsets(latest) under read_committed isolation; the high
watermark is the same under read_uncommitted; the log start offset is ListOffsets(earliest).
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from storage_core.adapters.kafka_features import KafkaFeatures, read_features
from storage_core.errors import KafkaAdminError

TIMEOUT_S = 30.0
"""How long a request waits for Kafka's answer unless the client properties set librdkafka's
``socket.timeout.ms`` (its timeout for admin requests), which then counts instead."""
POLL_S = 0.5
"""How often a wait looks at what librdkafka said of its broker connections (see ``_ConnectionErrors``)."""
_T = TypeVar("_T")


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    topic_id: str
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def _uuid_to_kafka(u: Any) -> str:
    raw = uuid.UUID(
        int=((u.get_most_significant_bits() & (2**64 - 1)) << 64)
        | (u.get_least_significant_bits() & (2**64 - 1))
    ).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass
class _ConnectionErrors:
    """librdkafka's last word on why a broker connection failed (authentication, TLS): a failed request
    itself says only "transport failure", or times out."""

    last: str = ""
    all_down: bool = False
    hung_up: bool = False
    """The latest error was the connection failing (closed, reset, refused) rather than the broker saying
    why: what a client without SASL or TLS sees at a listener that requires them."""
    at: float = -1e9
    """time.monotonic() of the latest error: older ones are not about the request that just failed."""
    refused_at: float = -1e9
    """time.monotonic() of the latest SASL refusal (the broker refused the credentials or the mechanism):
    Kafka's Java clients fail a request at once on it, librdkafka retries until the request's timeout, so
    the waits below give up on it instead. A failed TLS handshake is not counted: librdkafka reports a
    broker closing mid-handshake (a rolling restart) with the same code."""

    def record(self, error: Any) -> None:
        from confluent_kafka import KafkaError

        if error.code() == KafkaError._ALL_BROKERS_DOWN:  # says nothing of why
            self.all_down = True
        else:
            self.last = str(error.str())[:300]
            self.hung_up = error.code() == KafkaError._TRANSPORT
        self.at = time.monotonic()
        if error.code() in (
            KafkaError._AUTHENTICATION,
            KafkaError.SASL_AUTHENTICATION_FAILED,
            KafkaError.UNSUPPORTED_SASL_MECHANISM,
        ):
            self.refused_at = self.at

    def refused_since(self, began: float) -> bool:
        return self.refused_at >= began

    def recent(self, window: float) -> bool:
        return time.monotonic() - self.at <= window + 5


def admin_client(
    bootstrap_servers: str, config: Mapping[str, str] | None, own: Mapping[str, Any] | None = None
) -> Any:
    """A confluent_kafka AdminClient for ``bootstrap_servers`` with the cluster's client ``config`` and the
    caller's ``own`` settings (callbacks, timeouts; they win). A configuration librdkafka refuses is a
    one-line KafkaAdminError naming the property, never its value."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        return AdminClient({"bootstrap.servers": bootstrap_servers, **(config or {}), **(own or {})})
    except KafkaException as exc:
        raise refused_configuration(exc, config) from None


def refused_configuration(exc: BaseException, config: Mapping[str, str] | None) -> KafkaAdminError:
    """A librdkafka client's refusal of its configuration, as one line that names the property and never
    its value (librdkafka's message may quote the refused value, which may be a password)."""
    named = re.search(r'property:? "([^"]+)"', str(exc))
    what = f"property {named.group(1)}" if named else f"properties {', '.join(sorted(config or {}))}"
    return KafkaAdminError(f"Kafka client configuration refused: check {what}")


class BrokerRefused(Exception):
    """The broker refused this client's SASL login (its reason is the connection's diagnosis)."""

    def __str__(self) -> str:
        return "the broker refused the client's login"


class KafkaAdmin:
    """A thin wrapper over confluent_kafka's AdminClient for one cluster."""

    def __init__(self, bootstrap_servers: str, config: dict[str, str] | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._config = dict(config or {})
        self._secured = "security.protocol" in (config or {})
        # Not a bound method of self: the client would hold self, and a cycle outlives its last use.
        self._connection = _ConnectionErrors()
        self._admin = admin_client(bootstrap_servers, config, {"error_cb": self._connection.record})
        # librdkafka has accepted the value by now (an integer of milliseconds within its range).
        configured = self._config.get("socket.timeout.ms")
        self._timeout = int(configured) / 1000 if configured else TIMEOUT_S

    @property
    def client(self) -> Any:
        """The confluent_kafka AdminClient, for the adapters of other Admin APIs (``kafka_groups``)."""
        return self._admin

    @property
    def client_config(self) -> dict[str, str]:
        """The cluster's client properties (may hold credentials: never printed)."""
        return dict(self._config)

    @property
    def timeout(self) -> float:
        """How long a request waits for Kafka's answer, in seconds."""
        return self._timeout

    def wait(self, futures: dict[Any, Any], what: str) -> dict[Any, Any]:
        """Every future's result; the first failure is a ``KafkaAdminError`` naming ``what`` and the key,
        Kafka's reason and the connection's diagnosis (the original exception is its ``__cause__``)."""
        return self._wait(futures, what)

    def _diagnosis(self) -> str:
        """Why the broker connections failed, when librdkafka said so: it tells only ``error_cb``, which
        runs when the client is polled ("" when it said nothing)."""
        self._admin.poll(0)
        if not self._connection.recent(self._timeout):
            self._admin.poll(0.2)  # the error may be on its way from librdkafka's broker thread
        if not self._connection.recent(self._timeout):
            return ""
        said = f"; broker connection: {self._connection.last}" if self._connection.last else ""
        hung_up = self._connection.hung_up if self._connection.last else self._connection.all_down
        if hung_up and not self._secured:
            # What a plaintext client sees at a SASL listener: the broker hangs up (librdkafka reports a
            # closed connection or a broken pipe, whichever it meets first), nothing more.
            said += (
                "; no security.protocol is configured: if the broker's listener requires SASL or TLS, "
                "the client needs security.protocol and its sasl.* / ssl.* properties"
            )
        return said

    def _failure(self, what: str, exc: BaseException, diagnosis: str | None = None) -> str:
        """One line for a failed request: what, where, Kafka's reason (a timeout's is empty) and the
        :meth:`_diagnosis` (``diagnosis``: already made for this request's other failures)."""
        reason = str(exc) or f"no answer within {self._timeout:.0f} s ({type(exc).__name__})"
        note = self._diagnosis() if diagnosis is None else diagnosis
        return f"{what} on {self.bootstrap_servers}: {reason}{note}"

    def _wait(self, futures: dict[Any, Any], what: str) -> dict[Any, Any]:
        out = {}
        began = time.monotonic()
        for key, fut in futures.items():
            try:
                out[key] = self._result(fut, began)
            except Exception as exc:
                raise KafkaAdminError(self._failure(f"{what} {key}", exc)) from exc
        return out

    def _result(self, future: Any, began: float) -> Any:
        """``future.result(timeout)``, but a refusal no retry can change (``_ConnectionErrors``) ends the
        wait at once with :class:`BrokerRefused`."""
        import concurrent.futures

        deadline = began + self._timeout
        while True:
            try:
                return future.result(max(0.0, min(POLL_S, deadline - time.monotonic())))
            except concurrent.futures.TimeoutError:
                self._raise_if_refused(began)
                if time.monotonic() >= deadline:
                    raise

    def _raise_if_refused(self, began: float) -> None:
        self._admin.poll(0)  # librdkafka tells error_cb only when polled
        if self._connection.refused_since(began):
            raise BrokerRefused() from None

    def _metadata(self, timeout: float | None = None) -> Any:
        """``list_topics(timeout)``, asked in slices so that a refusal ends the wait (as :meth:`_result`)."""
        began = time.monotonic()
        deadline = began + (self._timeout if timeout is None else timeout)
        while True:
            try:
                return self._admin.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            except Exception:
                self._raise_if_refused(began)
                if time.monotonic() >= deadline:
                    raise

    def topic_names(self) -> list[str]:
        try:
            md = self._metadata()
        except Exception as exc:
            raise KafkaAdminError(self._failure("cannot reach Kafka: list topics", exc)) from exc
        return sorted(t for t in md.topics if not t.startswith("__"))

    def partitions(self) -> dict[str, list[int]]:
        """Every topic's partitions, from one metadata request (internal topics left out)."""
        try:
            md = self._metadata()
        except Exception as exc:
            raise KafkaAdminError(self._failure("cannot reach Kafka: list topics", exc)) from exc
        return {name: sorted(t.partitions) for name, t in md.topics.items() if not name.startswith("__")}

    def describe(self, topics: Iterable[str] | None = None) -> dict[tuple[str, int], PartitionInfo]:
        from confluent_kafka import TopicCollection

        names = list(topics) if topics is not None else self.topic_names()
        if not names:
            return {}
        described = self._wait(self._admin.describe_topics(TopicCollection(names)), "describe topic")
        out: dict[tuple[str, int], PartitionInfo] = {}
        for name, desc in described.items():
            out.update(_partitions(name, desc))
        return out

    def _list_offsets(
        self, tps: Iterable[tuple[str, int]], spec: Any, committed: bool
    ) -> dict[tuple[str, int], int]:
        from confluent_kafka import IsolationLevel, TopicPartition

        request = {TopicPartition(t, p): spec for t, p in tps}
        if not request:
            return {}
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        futures = self._admin.list_offsets(request, isolation_level=level, request_timeout=self._timeout)
        done = self._wait(futures, "list offsets")
        return {(tp.topic, tp.partition): int(info.offset) for tp, info in done.items()}

    def last_stable_offsets(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets(tps, OffsetSpec.latest(), committed=True)

    def high_watermarks(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets(tps, OffsetSpec.latest(), committed=False)

    def log_start_offsets(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets(tps, OffsetSpec.earliest(), committed=False)

    def offsets_for_times(
        self, timestamps: Mapping[tuple[str, int], int], committed: bool
    ) -> dict[tuple[str, int], int | None]:
        """Per partition, the first offset whose record timestamp is >= its timestamp (Kafka's
        offsetsForTimes); None where no record has one that late."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        request = {TopicPartition(t, p): OffsetSpec.for_timestamp(ts) for (t, p), ts in timestamps.items()}
        if not request:
            return {}
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        futures = self._admin.list_offsets(request, isolation_level=level, request_timeout=self._timeout)
        done = self._wait(futures, "list offsets for times")
        return {
            (tp.topic, tp.partition): (int(info.offset) if info.offset >= 0 else None)
            for tp, info in done.items()
        }

    def delete_records(self, before: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Advance log start offsets to ``before``; returns the low watermarks the brokers report."""
        from confluent_kafka import TopicPartition

        if not before:
            return {}
        futures = self._admin.delete_records(
            [TopicPartition(t, p, o) for (t, p), o in before.items()],
            request_timeout=self._timeout,
            operation_timeout=self._timeout,
        )
        done = self._wait(futures, "delete records")
        return {(tp.topic, tp.partition): int(res.low_watermark) for tp, res in done.items()}

    # ---- topic lifecycle and group offsets (topic recovery) ------------------------------------
    def broker_ids(self) -> list[int]:
        try:
            md = self._metadata()
        except Exception as exc:
            raise KafkaAdminError(self._failure("cannot reach Kafka: list topics", exc)) from exc
        return sorted(int(b) for b in md.brokers)

    def cluster_summary(self, timeout: float = 10.0) -> tuple[str | None, int | None, list[int]]:
        """Kafka's cluster id, the active controller's node id and the brokers' node ids (one metadata
        request: what a TieredCluster's status says of the cluster). A shorter wait than other requests:
        an unreachable cluster must not hold up the round for every other cluster."""
        try:
            md = self._metadata(min(timeout, self._timeout))
        except Exception as exc:
            raise KafkaAdminError(self._failure("cannot reach Kafka: list topics", exc)) from exc
        controller = md.controller_id if isinstance(md.controller_id, int) and md.controller_id >= 0 else None
        return md.cluster_id or None, controller, sorted(int(b) for b in md.brokers)

    def features(self, timeout: float = 5.0) -> KafkaFeatures:
        """The cluster's finalized ``metadata.version`` and the answering broker's release (one ApiVersions
        request of the project's own codec: librdkafka does not tell its answer)."""
        return read_features(self.bootstrap_servers, self._config, timeout)

    def broker_addresses(self) -> dict[int, tuple[str, int]]:
        """Node id -> (host, port) of every broker the cluster's metadata lists."""
        try:
            md = self._metadata()
        except Exception as exc:
            raise KafkaAdminError(self._failure("cannot reach Kafka: list topics", exc)) from exc
        return {int(b.id): (str(b.host), int(b.port)) for b in md.brokers.values()}

    def describe_if_exists(self, topic: str) -> dict[tuple[str, int], PartitionInfo]:
        """Like ``describe([topic])``, but empty when the topic does not exist (or is being deleted)."""
        from confluent_kafka import TopicCollection

        future = self._admin.describe_topics(TopicCollection([topic]))[topic]
        try:
            desc = self._result(future, time.monotonic())
        except Exception as exc:
            if _unknown_topic(exc):
                return {}
            raise KafkaAdminError(self._failure(f"describe topic {topic}", exc)) from exc
        return _partitions(topic, desc)

    def describe_many(
        self, topics: Iterable[str]
    ) -> tuple[dict[str, dict[tuple[str, int], PartitionInfo]], dict[str, str]]:
        """Describe many topics with one request: (existing topics' partitions by topic, error line by
        topic for those that could not be described). Missing topics are in neither."""
        from confluent_kafka import TopicCollection

        names = sorted(set(topics))
        if not names:
            return {}, {}
        try:
            futures = self._admin.describe_topics(TopicCollection(names), request_timeout=self._timeout)
        except Exception as exc:  # noqa: BLE001 - reported for every topic asked
            line = self._failure("describe topics", exc)
            return {}, dict.fromkeys(names, line)
        return self._per_topic(futures, "describe topic", _partitions, unknown_is_missing=True)

    def topic_configs_many(self, topics: Iterable[str]) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
        """Effective configurations of many topics with one request: (configs by topic, error by topic)."""
        from confluent_kafka.admin._config import ConfigResource  # not re-exported for type checkers

        names = sorted(set(topics))
        if not names:
            return {}, {}
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
        try:
            futures = self._admin.describe_configs(resources, request_timeout=self._timeout)
        except Exception as exc:  # noqa: BLE001 - reported for every topic asked
            line = self._failure("describe configs", exc)
            return {}, dict.fromkeys(names, line)
        return self._per_topic(
            {resource.name: future for resource, future in futures.items()},
            "describe configs",
            _config_values,
        )

    def _per_topic(
        self,
        futures: Mapping[str, Any],
        what: str,
        convert: Callable[[str, Any], _T],
        unknown_is_missing: bool = False,
    ) -> tuple[dict[str, _T], dict[str, str]]:
        """The answers of one request for many topics (futures by topic): (``convert(topic, answer)`` by
        topic, one error line by topic that failed, the others going on). With ``unknown_is_missing``, a
        topic Kafka does not know is in neither."""
        found: dict[str, _T] = {}
        errors: dict[str, str] = {}
        note: str | None = None  # one diagnosis for all of the request's failures
        began = time.monotonic()
        for name, future in futures.items():
            try:
                answer = self._result(future, began)
            except Exception as exc:  # noqa: BLE001 - reported for this topic; the others go on
                if unknown_is_missing and _unknown_topic(exc):
                    continue
                note = self._diagnosis() if note is None else note
                errors[name] = self._failure(f"{what} {name}", exc, note)
                continue
            found[name] = convert(name, answer)
        return found, errors

    def create_topic(
        self, topic: str, partitions: int, replication_factor: int, config: dict[str, str] | None = None
    ) -> dict[tuple[str, int], PartitionInfo]:
        """Create ``topic`` and wait until every partition has a leader; returns its description."""
        from confluent_kafka.cimpl import NewTopic

        new = NewTopic(topic, partitions, replication_factor, config=dict(config or {}))
        self._wait(self._admin.create_topics([new], request_timeout=self._timeout), "create topic")
        return self._wait_for_leaders(topic, partitions)

    def create_partitions(self, topic: str, total: int) -> dict[tuple[str, int], PartitionInfo]:
        """Grow ``topic`` to ``total`` partitions and wait until every partition has a leader."""
        from confluent_kafka.cimpl import NewPartitions

        self._wait(
            self._admin.create_partitions([NewPartitions(topic, total)], request_timeout=self._timeout),
            "create partitions",
        )
        return self._wait_for_leaders(topic, total)

    def _wait_for_leaders(self, topic: str, partitions: int) -> dict[tuple[str, int], PartitionInfo]:
        deadline = time.monotonic() + self._timeout
        while True:
            described = self.describe_if_exists(topic)
            if len(described) >= partitions and all(i.leader is not None for i in described.values()):
                return described
            if time.monotonic() > deadline:
                raise KafkaAdminError(
                    f"topic {topic} on {self.bootstrap_servers}: partitions have no leader "
                    f"after {self._timeout:.0f}s"
                )
            time.sleep(0.2)

    def topic_configs(self, topic: str) -> dict[str, str]:
        """The effective configuration of ``topic`` (explicit and inherited values)."""
        from confluent_kafka.admin._config import ConfigResource  # not re-exported for type checkers

        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        done = self._wait(
            self._admin.describe_configs([resource], request_timeout=self._timeout), "describe configs"
        )
        return _config_values(topic, next(iter(done.values())))


def _unknown_topic(exc: BaseException) -> bool:
    """Whether ``exc`` is Kafka saying the topic does not exist (or is being deleted)."""
    from confluent_kafka import KafkaError, KafkaException

    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def _config_values(_topic: str, entries: Mapping[str, Any]) -> dict[str, str]:
    """The set values of one topic's ``describe_configs`` answer (explicit and inherited)."""
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def _partitions(topic: str, desc: Any) -> dict[tuple[str, int], PartitionInfo]:
    """The partitions of one confluent-kafka ``TopicDescription``."""
    topic_id = _uuid_to_kafka(desc.topic_id)
    return {
        (topic, p.id): PartitionInfo(
            topic,
            p.id,
            topic_id,
            p.leader.id if p.leader is not None else None,
            tuple(r.id for r in p.replicas),
            tuple(r.id for r in p.isr),
        )
        for p in desc.partitions
    }
