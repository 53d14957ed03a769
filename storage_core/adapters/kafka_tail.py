"""Reading an offset range of one partition from the brokers as Arrow batches (confluent-kafka).

The Spark source's hybrid read (``continueFromKafka``) reads each partition's history from the remote
tier and the rest, [the tier's end, the batch's end), here. The consumer is assigned, never subscribed:
no group membership, no commits (``enable.auto.commit=false``), and a start the brokers no longer hold
is an error (``auto.offset.reset=error``), never a silent jump.

The range is complete when a record at or past its end arrives, or the partition's end is reached at or
past it (``enable.partition.eof``): with read_committed, aborted records and transaction markers take
offsets but are never delivered, so the last offsets of a range may be ones no record comes for.

librdkafka tells only its error callback why a connection failed, and retries for ever: a refused login
(wrong SASL password, mechanism the listener does not offer) fails the task at once with the brokers'
reason; other connection errors are retried until ``kafkaConsumer.pollTimeoutMs`` and then named.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from storage_core.errors import DataLossError, KafkaAdminError
from storage_core.formats.arrow_records import kafka_schema

BATCH_RECORDS = 10_000
"""Records per Arrow batch handed to Spark."""


_REFUSALS = frozenset({-169, 58, 29, 31})
"""KafkaError._AUTHENTICATION, SASL_AUTHENTICATION_FAILED, TOPIC_AUTHORIZATION_FAILED,
CLUSTER_AUTHORIZATION_FAILED: waiting changes nothing, the credentials or ACLs must."""


@dataclass
class _ConnectionErrors:
    """What librdkafka's error callback said last; ``refused`` once a login or an ACL was refused."""

    last: str = ""
    refused: str = ""

    def record(self, error: Any) -> None:
        # librdkafka's reasons name brokers, mechanisms and causes, never a property's value.
        text = str(error.str())[:300]
        self.last = text
        if error.code() in _REFUSALS or error.fatal():
            self.refused = text


@dataclass(frozen=True)
class KafkaSpec:
    """How to reach the brokers: librdkafka properties (``kafka.*`` options without the prefix); picklable,
    shipped to every task. Values may be secrets: ``repr`` names the properties only."""

    config: dict[str, str] = field(default_factory=dict)
    poll_timeout_ms: int = 120_000
    """The longest a task waits for the brokers without receiving anything before it fails."""

    def __repr__(self) -> str:
        return f"KafkaSpec(properties={sorted(self.config)}, poll_timeout_ms={self.poll_timeout_ms})"

    @property
    def bootstrap_servers(self) -> str:
        return self.config["bootstrap.servers"]


def _consumer(spec: KafkaSpec, read_committed: bool, errors: _ConnectionErrors) -> Any:
    from confluent_kafka import Consumer, KafkaException

    config = {
        "group.id": f"tierkeeper-spark-{uuid.uuid4().hex[:12]}",
        **spec.config,
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "auto.offset.reset": "error",
        "enable.partition.eof": "true",
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        "error_cb": errors.record,
    }
    try:
        return Consumer(config)
    except KafkaException as exc:
        # librdkafka's message may quote a refused value, which may be a password: name no value.
        raise KafkaAdminError(
            f"Kafka consumer configuration refused (check the kafka.* options): {type(exc).__name__}"
        ) from None


def read_range(
    spec: KafkaSpec,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    read_committed: bool,
    include_headers: bool,
) -> Iterator[pa.RecordBatch]:
    """The records of offsets [start, end) of one partition, in offset order, with the Kafka source's
    columns. Fails naming the partition when the brokers no longer hold ``start`` or say nothing for
    ``spec.poll_timeout_ms``."""
    from confluent_kafka import KafkaError, TopicPartition

    if start >= end:
        return
    schema = kafka_schema(include_headers)
    errors = _ConnectionErrors()
    consumer = _consumer(spec, read_committed, errors)
    rows: dict[str, list[Any]] = {name: [] for name in schema.names}
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        quiet_since = time.monotonic()
        while True:
            msg = consumer.poll(1.0)
            if errors.refused:
                raise KafkaAdminError(
                    f"{topic}-{partition}: the brokers at {spec.bootstrap_servers} refused the consumer: "
                    f"{errors.refused} (check the kafka.security.protocol, kafka.sasl.* and kafka.ssl.* "
                    "options)"
                )
            if msg is None:
                if (time.monotonic() - quiet_since) * 1000 > spec.poll_timeout_ms:
                    said = f"; last connection error: {errors.last}" if errors.last else ""
                    raise KafkaAdminError(
                        f"{topic}-{partition}: no answer from {spec.bootstrap_servers} for "
                        f"{spec.poll_timeout_ms} ms while reading offsets {start}..{end - 1} "
                        f"(kafkaConsumer.pollTimeoutMs){said}"
                    )
                continue
            quiet_since = time.monotonic()
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= end:
                        break
                    continue  # the range's end is not readable yet (it was when planned): wait
                if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    raise DataLossError(
                        f"{topic}-{partition}: offsets from {start} to {end - 1} are neither in the remote "
                        f"tier nor on the brokers any more ({error.str()})"
                    )
                raise KafkaAdminError(f"{topic}-{partition}: reading from the brokers: {error.str()}")
            offset = msg.offset()
            if offset >= end:
                break
            _append(rows, msg, include_headers)
            if len(rows["offset"]) >= BATCH_RECORDS:
                yield _batch(rows, schema)
                rows = {name: [] for name in schema.names}
            if offset == end - 1:
                break
        if rows["offset"]:
            yield _batch(rows, schema)
    finally:
        consumer.close()


def _append(rows: dict[str, list[Any]], msg: Any, include_headers: bool) -> None:
    kind, millis = msg.timestamp()
    rows["key"].append(msg.key())
    rows["value"].append(msg.value())
    rows["topic"].append(msg.topic())
    rows["partition"].append(msg.partition())
    rows["offset"].append(msg.offset())
    rows["timestamp"].append(millis * 1000)
    # confluent-kafka: 1 CreateTime, 2 LogAppendTime; the Kafka source's column: 0 CreateTime, 1 LogAppend.
    rows["timestampType"].append(1 if kind == 2 else 0)
    if include_headers:
        headers = msg.headers()
        # As the tier's decoder and the Kafka source: a record without headers has a null array.
        rows["headers"].append([{"key": k, "value": v} for k, v in headers] if headers else None)


def _batch(rows: dict[str, list[Any]], schema: pa.Schema) -> pa.RecordBatch:
    arrays = []
    for f in schema:
        if f.name == "timestamp":
            arrays.append(pa.array(rows["timestamp"], pa.int64()).cast(f.type))
        else:
            arrays.append(pa.array(rows[f.name], f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
