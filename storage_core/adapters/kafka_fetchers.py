"""Kafka Admin adapter for the fetcher planner: read the live assignment, read and set num.replica.fetchers.

Reads and per-broker overrides go through confluent-kafka. The cluster-wide default is a BROKER
resource with an empty name, which librdkafka refuses to build (rd_kafka_ConfigResource_new rejects
empty names), so that one IncrementalAlterConfigs request (API key 44, version 0) is written here by
hand on a plain socket. That path speaks PLAINTEXT only; on TLS/SASL clusters set per-broker overrides.

Every step is verified: after setting a value we poll DescribeConfigs on each affected broker until
it reports the value, because the change travels through the metadata log and a broker that fails to
reconfigure keeps its old value without failing the request.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storage_core.adapters.kafka_admin import admin_client
from storage_core.errors import ConfigError, KafkaAdminError
from storage_core.fetchers.model import Assignment
from storage_core.fetchers.planner import is_allowed_step
from storage_core.gateway.host_port import parse_addresses

# confluent_kafka.admin re-exports its public classes without __all__, so mypy --strict needs the
# attr-defined ignores on those imports below.
CONFIG_NAME = "num.replica.fetchers"
_INCREMENTAL_ALTER_CONFIGS = 44
_BROKER_RESOURCE = 4
_OP_SET = 0


@dataclass(frozen=True)
class FetcherSetting:
    """What one broker reports for num.replica.fetchers, and where the value comes from."""

    broker: int
    value: int
    source: str

    @property
    def per_broker_override(self) -> bool:
        return self.source == "DYNAMIC_BROKER_CONFIG"


@dataclass(frozen=True)
class StepResult:
    value: int
    brokers: tuple[int, ...]
    seconds: float


def _kafka_message(exc: BaseException) -> str:
    first = exc.args[0] if exc.args else exc
    text = first.str() if hasattr(first, "str") else str(first)
    return str(text)


class FetcherAdmin:
    """The Admin calls the fetcher planner needs, with errors translated to KafkaAdminError."""

    def __init__(
        self, bootstrap_servers: str, timeout: float = 30.0, config: Mapping[str, str] | None = None
    ) -> None:
        """``config``: further client settings (security), as a cluster configuration's clientConfig."""
        self.bootstrap_servers = bootstrap_servers
        self.timeout = timeout
        own = {"bootstrap.servers": bootstrap_servers, "socket.timeout.ms": int(timeout * 1000)}
        self._admin = admin_client(bootstrap_servers, config, own)

    # ---- reading ---------------------------------------------------------------------------------
    def _metadata(self) -> Any:
        from confluent_kafka import KafkaException

        try:
            return self._admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise KafkaAdminError(
                f"cannot read cluster metadata from {self.bootstrap_servers}: {_kafka_message(exc)}"
            ) from None

    def assignment(self) -> Assignment:
        """The live assignment: every topic's partitions, current leader first, then live followers.

        Followers on brokers that are not registered do not fetch, and leaderless partitions have
        nobody to fetch from, so both are left out (a leaderless partition gets an empty list).
        """
        md = self._metadata()
        live = set(md.brokers)
        topics: dict[str, tuple[tuple[int, ...], ...]] = {}
        for name, topic in md.topics.items():
            if topic.error is not None:
                raise KafkaAdminError(f"cannot describe topic {name!r}: {topic.error.str()}")
            parts = []
            for pid in range(len(topic.partitions)):
                pm = topic.partitions.get(pid)
                if pm is None:
                    raise KafkaAdminError(
                        f"topic {name!r} reports partitions {sorted(topic.partitions)}, not 0..n-1"
                    )
                if pm.leader < 0:
                    parts.append(())
                    continue
                followers = tuple(r for r in pm.replicas if r != pm.leader and r in live)
                parts.append((pm.leader, *followers))
            topics[name] = tuple(parts)
        return Assignment(brokers=tuple(sorted(live)), topics=topics)

    def brokers(self) -> list[int]:
        return sorted(self._metadata().brokers)

    def settings(self, brokers: Sequence[int] | None = None) -> dict[int, FetcherSetting]:
        """num.replica.fetchers as each broker currently runs it (DescribeConfigs on that broker)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

        result = {}
        for broker in brokers if brokers is not None else self.brokers():
            resource = ConfigResource(ResourceType.BROKER, str(broker))
            try:
                future = self._admin.describe_configs([resource], request_timeout=self.timeout)[resource]
                entry = future.result()[CONFIG_NAME]
            except KafkaException as exc:
                raise KafkaAdminError(
                    f"cannot describe configs of broker {broker}: {_kafka_message(exc)}"
                ) from None
            except KeyError:
                raise KafkaAdminError(f"broker {broker} does not report {CONFIG_NAME}") from None
            result[broker] = FetcherSetting(broker, int(entry.value), _source_name(entry.source))
        return result

    # ---- writing ---------------------------------------------------------------------------------
    def set_broker_override(self, broker: int, value: int) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        entry = ConfigEntry(CONFIG_NAME, str(value), incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.BROKER, str(broker), incremental_configs=[entry])
        try:
            self._admin.incremental_alter_configs([resource], request_timeout=self.timeout)[resource].result()
        except KafkaException as exc:
            raise KafkaAdminError(
                f"broker {broker} refused {CONFIG_NAME}={value}: {_kafka_message(exc)}"
            ) from None

    def set_cluster_default(self, value: int) -> None:
        last_error = "no address"
        for address in parse_addresses(self.bootstrap_servers):
            try:
                error = _incremental_alter_cluster_default(
                    address.host, address.port, CONFIG_NAME, str(value), self.timeout
                )
            except OSError as exc:
                last_error = f"{address}: {exc}"
                continue
            if error is not None:
                raise KafkaAdminError(f"cluster default {CONFIG_NAME}={value} refused: {error}")
            return
        raise KafkaAdminError(
            f"cannot set the cluster default through any bootstrap server ({last_error}); this path speaks "
            "PLAINTEXT only, use --broker per broker on TLS/SASL listeners"
        )

    def wait_for(self, value: int, brokers: Sequence[int], timeout: float | None = None) -> float:
        """Poll until every broker in ``brokers`` reports ``value``; return the seconds it took."""
        start = time.monotonic()
        deadline = start + (self.timeout if timeout is None else timeout)
        while True:
            seen = self.settings(brokers)
            lagging = {b: s.value for b, s in seen.items() if s.value != value}
            if not lagging:
                return time.monotonic() - start
            if time.monotonic() > deadline:
                raise KafkaAdminError(
                    f"{CONFIG_NAME}={value} not in effect after {deadline - start:.0f}s; brokers still "
                    f"report {lagging} "
                    "(a broker that fails to reconfigure logs why)"
                )
            time.sleep(0.2)

    def apply(
        self,
        steps: Sequence[int],
        broker: int | None = None,
        on_step: Callable[[StepResult], None] | None = None,
    ) -> list[StepResult]:
        """Set each value of ``steps`` in turn (cluster default, or ``broker``'s override), verifying each."""
        brokers = self.brokers()
        if broker is not None and broker not in brokers:
            raise ConfigError(f"broker {broker} is not in the cluster (brokers: {brokers})")
        targets = [broker] if broker is not None else brokers
        current = common_value(self.settings(targets), per_broker=broker is not None)
        results = []
        for value in steps:
            if not is_allowed_step(current, value):
                raise ConfigError(
                    f"step {current} -> {value} is outside Kafka's allowed range [{current // 2}, "
                    f"{current * 2}]"
                )
            if broker is None:
                self.set_cluster_default(value)
            else:
                self.set_broker_override(broker, value)
            step = StepResult(value, tuple(targets), self.wait_for(value, targets))
            results.append(step)
            if on_step is not None:
                on_step(step)
            current = value
        return results


def _source_name(source: Any) -> str:
    from confluent_kafka.admin import ConfigSource  # type: ignore[attr-defined]

    # confluent-kafka hands the source over as a plain int from DescribeConfigs.
    try:
        return str(ConfigSource(source).name)
    except ValueError:
        return "UNKNOWN_CONFIG"


def common_value(settings: dict[int, FetcherSetting], per_broker: bool) -> int:
    """The value all ``settings`` share; refuse a cluster-default change that some brokers would ignore."""
    if not per_broker:
        overridden = sorted(b for b, s in settings.items() if s.per_broker_override)
        if overridden:
            raise ConfigError(
                f"brokers {overridden} have a per-broker {CONFIG_NAME} override, which a cluster default "
                "would not change; apply with --broker for each of them instead"
            )
    values = sorted({s.value for s in settings.values()})
    if len(values) != 1:
        detail = {b: s.value for b, s in sorted(settings.items())}
        raise ConfigError(
            f"brokers disagree on {CONFIG_NAME} ({detail}); change them one by one with --broker"
        )
    return values[0]


def _string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def _incremental_alter_cluster_default(
    host: str, port: int, name: str, value: str, timeout: float
) -> str | None:
    """Send IncrementalAlterConfigs v0 for the cluster-default BROKER resource; return the error or None."""
    correlation_id = 1
    body = (
        struct.pack(">hhi", _INCREMENTAL_ALTER_CONFIGS, 0, correlation_id)
        + _string("tierkeeper-fetchers")
        + struct.pack(">ib", 1, _BROKER_RESOURCE)
        + _string("")
        + struct.pack(">i", 1)
        + _string(name)
        + struct.pack(">b", _OP_SET)
        + _string(value)
        + struct.pack(">?", False)
    )
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _read_exactly(sock, 4))
        response = _read_exactly(sock, size)
    (got_id, _throttle, count) = struct.unpack_from(">iii", response, 0)
    if got_id != correlation_id or count != 1:
        raise KafkaAdminError(f"unexpected IncrementalAlterConfigs response from {host}:{port}")
    error_code, message_len = struct.unpack_from(">hh", response, 12)
    if error_code == 0:
        return None
    message = response[16 : 16 + message_len].decode(errors="replace") if message_len >= 0 else ""
    return f"{_error_name(error_code)}: {message}" if message else _error_name(error_code)


def _error_name(code: int) -> str:
    from confluent_kafka import KafkaError

    # librdkafka numbers broker error codes as the Kafka protocol does.
    return str(KafkaError(code).name())


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    remaining = size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise OSError("connection closed mid-response")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


__all__ = ["CONFIG_NAME", "FetcherAdmin", "FetcherSetting", "StepResult", "common_value"]
