"""Kafka Admin API calls the storage core needs (confluent-kafka), with errors translated.

Offsets: the last stable offset is ListOffsets(latest) under read_committed isolation; the high
watermark is the same under read_uncommitted; the log start offset is ListOffsets(earliest).
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from storage_core.errors import KafkaAdminError

TIMEOUT_S = 30.0


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


class KafkaAdmin:
    """A thin wrapper over confluent_kafka's AdminClient for one cluster."""

    def __init__(self, bootstrap_servers: str, config: dict[str, str] | None = None) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        self.bootstrap_servers = bootstrap_servers
        try:
            self._admin = AdminClient({"bootstrap.servers": bootstrap_servers, **(config or {})})
        except KafkaException as exc:
            # librdkafka's message may quote the refused value, which may be a password: name only the
            # property.
            named = re.search(r'property:? "([^"]+)"', str(exc))
            what = f"property {named.group(1)}" if named else f"properties {', '.join(sorted(config or {}))}"
            raise KafkaAdminError(f"Kafka client configuration refused: check {what}") from None

    def _wait(self, futures: dict[Any, Any], what: str) -> dict[Any, Any]:
        out = {}
        for key, fut in futures.items():
            try:
                out[key] = fut.result(TIMEOUT_S)
            except Exception as exc:
                raise KafkaAdminError(f"{what} {key} on {self.bootstrap_servers}: {exc}") from exc
        return out

    def topic_names(self) -> list[str]:
        try:
            md = self._admin.list_topics(timeout=TIMEOUT_S)
        except Exception as exc:
            raise KafkaAdminError(f"cannot reach Kafka at {self.bootstrap_servers}: {exc}") from exc
        return sorted(t for t in md.topics if not t.startswith("__"))

    def describe(self, topics: Iterable[str] | None = None) -> dict[tuple[str, int], PartitionInfo]:
        from confluent_kafka import TopicCollection

        names = list(topics) if topics is not None else self.topic_names()
        if not names:
            return {}
        described = self._wait(self._admin.describe_topics(TopicCollection(names)), "describe topic")
        out: dict[tuple[str, int], PartitionInfo] = {}
        for name, desc in described.items():
            topic_id = _uuid_to_kafka(desc.topic_id)
            for p in desc.partitions:
                out[(name, p.id)] = PartitionInfo(
                    name,
                    p.id,
                    topic_id,
                    p.leader.id if p.leader is not None else None,
                    tuple(r.id for r in p.replicas),
                    tuple(r.id for r in p.isr),
                )
        return out

    def _list_offsets(
        self, tps: Iterable[tuple[str, int]], spec: Any, committed: bool
    ) -> dict[tuple[str, int], int]:
        from confluent_kafka import IsolationLevel, TopicPartition

        request = {TopicPartition(t, p): spec for t, p in tps}
        if not request:
            return {}
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        futures = self._admin.list_offsets(request, isolation_level=level, request_timeout=TIMEOUT_S)
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

    def delete_records(self, before: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Advance log start offsets to ``before``; returns the low watermarks the brokers report."""
        from confluent_kafka import TopicPartition

        if not before:
            return {}
        futures = self._admin.delete_records(
            [TopicPartition(t, p, o) for (t, p), o in before.items()],
            request_timeout=TIMEOUT_S,
            operation_timeout=TIMEOUT_S,
        )
        done = self._wait(futures, "delete records")
        return {(tp.topic, tp.partition): int(res.low_watermark) for tp, res in done.items()}

    # ---- topic lifecycle and group offsets (topic recovery) ------------------------------------
    def broker_ids(self) -> list[int]:
        try:
            md = self._admin.list_topics(timeout=TIMEOUT_S)
        except Exception as exc:
            raise KafkaAdminError(f"cannot reach Kafka at {self.bootstrap_servers}: {exc}") from exc
        return sorted(int(b) for b in md.brokers)

    def describe_if_exists(self, topic: str) -> dict[tuple[str, int], PartitionInfo]:
        """Like ``describe([topic])``, but empty when the topic does not exist (or is being deleted)."""
        from confluent_kafka import KafkaError, KafkaException, TopicCollection

        future = self._admin.describe_topics(TopicCollection([topic]))[topic]
        try:
            desc = future.result(TIMEOUT_S)
        except KafkaException as exc:
            if (
                exc.args
                and isinstance(exc.args[0], KafkaError)
                and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            ):
                return {}
            raise KafkaAdminError(f"describe topic {topic} on {self.bootstrap_servers}: {exc}") from exc
        except Exception as exc:
            raise KafkaAdminError(f"describe topic {topic} on {self.bootstrap_servers}: {exc}") from exc
        return _partitions(topic, desc)

    def describe_many(
        self, topics: Iterable[str]
    ) -> tuple[dict[str, dict[tuple[str, int], PartitionInfo]], dict[str, str]]:
        """Describe many topics with one request: (existing topics' partitions by topic, error line by
        topic for those that could not be described). Missing topics are in neither."""
        from confluent_kafka import KafkaError, KafkaException, TopicCollection

        names = sorted(set(topics))
        if not names:
            return {}, {}
        try:
            futures = self._admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - reported for every topic asked
            return {}, {name: f"describe topic {name} on {self.bootstrap_servers}: {exc}" for name in names}
        found: dict[str, dict[tuple[str, int], PartitionInfo]] = {}
        errors: dict[str, str] = {}
        for name, future in futures.items():
            try:
                desc = future.result(TIMEOUT_S)
            except KafkaException as exc:
                code = exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else None
                if code != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    errors[name] = f"describe topic {name} on {self.bootstrap_servers}: {exc}"
                continue
            except Exception as exc:  # noqa: BLE001 - reported for this topic; the others go on
                errors[name] = f"describe topic {name} on {self.bootstrap_servers}: {exc}"
                continue
            found[name] = _partitions(name, desc)
        return found, errors

    def topic_configs_many(self, topics: Iterable[str]) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
        """Effective configurations of many topics with one request: (configs by topic, error by topic)."""
        from confluent_kafka.admin._config import ConfigResource  # not re-exported for type checkers

        names = sorted(set(topics))
        if not names:
            return {}, {}
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
        try:
            futures = self._admin.describe_configs(resources, request_timeout=TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - reported for every topic asked
            where = self.bootstrap_servers
            return {}, {name: f"describe configs {name} on {where}: {exc}" for name in names}
        configs: dict[str, dict[str, str]] = {}
        errors: dict[str, str] = {}
        for resource, future in futures.items():
            try:
                entries = future.result(TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - reported for this topic; the others go on
                where = self.bootstrap_servers
                errors[resource.name] = f"describe configs {resource.name} on {where}: {exc}"
                continue
            configs[resource.name] = {n: e.value for n, e in entries.items() if e.value is not None}
        return configs, errors

    def create_topic(
        self, topic: str, partitions: int, replication_factor: int, config: dict[str, str] | None = None
    ) -> dict[tuple[str, int], PartitionInfo]:
        """Create ``topic`` and wait until every partition has a leader; returns its description."""
        from confluent_kafka.cimpl import NewTopic

        new = NewTopic(topic, partitions, replication_factor, config=dict(config or {}))
        self._wait(self._admin.create_topics([new], request_timeout=TIMEOUT_S), "create topic")
        return self._wait_for_leaders(topic, partitions)

    def create_partitions(self, topic: str, total: int) -> dict[tuple[str, int], PartitionInfo]:
        """Grow ``topic`` to ``total`` partitions and wait until every partition has a leader."""
        from confluent_kafka.cimpl import NewPartitions

        self._wait(
            self._admin.create_partitions([NewPartitions(topic, total)], request_timeout=TIMEOUT_S),
            "create partitions",
        )
        return self._wait_for_leaders(topic, total)

    def _wait_for_leaders(self, topic: str, partitions: int) -> dict[tuple[str, int], PartitionInfo]:
        import time

        deadline = time.monotonic() + TIMEOUT_S
        while True:
            described = self.describe_if_exists(topic)
            if len(described) >= partitions and all(i.leader is not None for i in described.values()):
                return described
            if time.monotonic() > deadline:
                raise KafkaAdminError(
                    f"topic {topic} on {self.bootstrap_servers}: partitions have no leader "
                    f"after {TIMEOUT_S:.0f}s"
                )
            time.sleep(0.2)

    def topic_configs(self, topic: str) -> dict[str, str]:
        """The effective configuration of ``topic`` (explicit and inherited values)."""
        from confluent_kafka.admin._config import ConfigResource  # not re-exported for type checkers

        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        done = self._wait(
            self._admin.describe_configs([resource], request_timeout=TIMEOUT_S), "describe configs"
        )
        entries = next(iter(done.values()))
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
