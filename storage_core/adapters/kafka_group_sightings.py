"""The gateway's writes to the group sightings topic (``__tierkeeper_gateway_groups``): creating it when
it is missing and producing sightings to it (confluent-kafka stays inside; its errors become ours).

The producer is idempotent with ``acks=all``: a record Kafka acknowledged is on every in-sync replica, and
a retry inside librdkafka never writes one twice or out of order. It uses the gateway's own Kafka client
properties (TLS, SASL), the ones its broker discovery uses. Every call blocks: the publisher runs them on a
thread of its own, never on the gateway's event loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from storage_core.adapters.kafka_admin import KafkaAdmin, refused_configuration
from storage_core.errors import KafkaAdminError
from storage_core.gateway.group_sightings import SIGHTINGS_TOPIC, GroupSighting, encode_sighting
from storage_core.gateway.group_writes import topic_settings

DELIVERY_TIMEOUT_MS = 15_000
"""How long librdkafka tries to deliver one record before it reports it failed (its default is 5
minutes); the publisher then writes the group's current state again in a later round."""


class SightingsWriter:
    def __init__(self, admin: KafkaAdmin, config: dict[str, str], topic: str = SIGHTINGS_TOPIC) -> None:
        """``admin``: the gateway's admin client of the same cluster and ``config`` (it creates the topic)."""
        self.bootstrap_servers = admin.bootstrap_servers
        self.topic = topic
        self._config = dict(config)
        self._admin = admin
        self._lock = threading.Lock()
        self._acked: list[GroupSighting] = []
        self._failed: list[str] = []
        self._producer = self._new_producer()

    def _new_producer(self) -> Any:
        from confluent_kafka import KafkaException, Producer

        try:
            return Producer(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    **self._config,
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 20,
                    "message.timeout.ms": DELIVERY_TIMEOUT_MS,
                    # librdkafka's own lines through the gateway's log (its format, --log-format json).
                    "logger": logging.getLogger("tierkeeper.gateway.kafka"),
                }
            )
        except KafkaException as exc:
            raise refused_configuration(exc, self._config) from None

    def ensure_topic(self) -> bool:
        """Create the topic unless it exists; True when this call created it."""
        if self._admin.describe_if_exists(self.topic):
            return False
        settings = topic_settings(len(self._admin.broker_ids()))
        try:
            self._admin.create_topic(
                self.topic, settings.partitions, settings.replication_factor, settings.config
            )
        except KafkaAdminError:
            if self._admin.describe_if_exists(self.topic):  # another gateway replica created it meanwhile
                return False
            raise
        return True

    def write(
        self, sightings: Iterable[GroupSighting], timeout_s: float
    ) -> tuple[list[GroupSighting], list[str]]:
        """Produce ``sightings`` and wait up to ``timeout_s`` for Kafka's answers: (the sightings Kafka
        acknowledged, Kafka's reason for each record that failed). Nothing new is produced while records
        of an earlier call are still on their way (bounded: at most one round in flight); their answers
        are returned by the call that sees them. A producer that hit a fatal error (the broker refused
        its idempotent producer id: no IDEMPOTENT_WRITE or Write ACL yet) is replaced for the next call."""
        from confluent_kafka import KafkaError, KafkaException

        refused = []
        try:
            if len(self._producer) == 0:
                for sighting in sightings:
                    key, value = encode_sighting(sighting)
                    self._producer.produce(
                        self.topic, key=key, value=value, on_delivery=self._answer(sighting)
                    )
            self._producer.flush(timeout_s)
        except (KafkaException, BufferError) as exc:
            refused.append(str(exc))
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is not None and (error.fatal() or error.code() == KafkaError._FATAL):
                self._producer = self._new_producer()
        with self._lock:
            acked, self._acked = self._acked, []
            failed, self._failed = self._failed, []
        return acked, refused + failed

    def _answer(self, sighting: GroupSighting) -> Any:
        def delivered(error: Any, _message: Any) -> None:
            with self._lock:
                if error is None:
                    self._acked.append(sighting)
                else:
                    self._failed.append(str(error))

        return delivered

    def close(self, timeout_s: float = 5.0) -> None:
        self._producer.flush(timeout_s)
