"""The Kafka side of a restore: a transactional producer that commits progress with the records.

This is an adapter (confluent-kafka stays inside it; its errors become ours). One transactional id per
partition of a target incarnation (``state.restore_transactional_id``): ``init_transactions`` of a rerun
bumps the producer epoch, which fences a crashed or still-running predecessor and aborts whatever
transaction it left open, so a late write of a killed process can never land after the rerun has read
the committed progress.

Records keep key, value, headers and timestamp; the timestamp is sent as CreateTime (the target topic
must use CreateTime, checked before restoring), which also preserves LogAppendTime stamps of the old log.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from storage_core.errors import KafkaAdminError
from storage_core.formats.records import Record
from storage_core.recovery.restore import ChunkAborted
from storage_core.recovery.state import Progress

TIMEOUT_S = 60.0
COMMIT_ATTEMPTS = 3


def _kafka_error(exc: BaseException) -> Any:
    return exc.args[0] if exc.args and hasattr(exc.args[0], "code") else None


class TransactionalSink:
    """Restores into ``topic`` with progress in group ``group`` and transactional id ``transactional_id``
    (implements ``RestoreSink``)."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        group: str,
        *,
        transactional_id: str,
        transaction_timeout_ms: int = 120_000,
        message_max_bytes: int | None = None,
        batch_bytes: int | None = None,
    ) -> None:
        from confluent_kafka import Consumer, KafkaException, Producer

        self.topic = topic
        self.bootstrap_servers = bootstrap_servers
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "transactional.id": transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "compression.type": "lz4",
            "transaction.timeout.ms": transaction_timeout_ms,
        }
        if message_max_bytes is not None:
            config["message.max.bytes"] = message_max_bytes
        if batch_bytes is not None:
            config["batch.size"] = batch_bytes
        self._in_txn = False
        try:
            self._producer = Producer(config)
            # For the group metadata a transactional offset commit names, and to read the progress back
            # (read_committed, librdkafka's default, asks for stable offsets); it never joins the group.
            self._consumer = Consumer(
                {"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False}
            )
            self._producer.init_transactions(TIMEOUT_S)
            self._group_metadata = self._consumer.consumer_group_metadata()
        except KafkaException as exc:
            raise KafkaAdminError(
                f"cannot start the restore producer (transactional.id {transactional_id}) on "
                f"{bootstrap_servers}: {exc}"
            ) from exc

    def committed(self, partitions: Iterable[int]) -> dict[int, tuple[int, str | None]]:
        """The committed progress (offset, metadata) per partition; call after ``init_transactions``, which
        settles whatever a predecessor left open, so this read is stable."""
        return _committed(self._consumer, self.topic, partitions, self.bootstrap_servers)

    def close(self) -> None:
        self.abort_chunk()
        self._consumer.close()
        self._producer.flush(TIMEOUT_S)

    def __enter__(self) -> TransactionalSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def produce_chunk(self, partition: int, records: Sequence[Record]) -> list[tuple[int, int]]:
        from confluent_kafka import KafkaException

        pairs: list[tuple[int, int]] = []
        errors: list[Any] = []

        def delivered(err: Any, msg: Any, old: int) -> None:
            if err is not None:
                errors.append(err)
            else:
                pairs.append((old, int(msg.offset())))

        try:
            self._producer.begin_transaction()
            self._in_txn = True
            for record in records:
                self._produce(partition, record, lambda err, msg, old=record.offset: delivered(err, msg, old))
            left = self._producer.flush(TIMEOUT_S)
        except KafkaException as exc:
            raise self._translate(exc, f"produce to {self.topic}-{partition}") from exc
        if errors:
            raise self._translate_error(errors[0], f"produce to {self.topic}-{partition}")
        if left or len(pairs) != len(records):
            raise ChunkAborted(
                f"produce to {self.topic}-{partition}: {len(records) - len(pairs)} records "
                f"not acknowledged within {TIMEOUT_S:.0f}s"
            )
        return pairs

    def _produce(self, partition: int, record: Record, on_delivery: Any) -> None:
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    key=record.key,
                    value=record.value,
                    headers=list(record.headers) or None,
                    partition=partition,
                    timestamp=record.timestamp,
                    on_delivery=on_delivery,
                )
                self._producer.poll(0)
                return
            except BufferError:
                self._producer.poll(0.1)  # the local queue is full: let deliveries drain it

    def commit_chunk(self, partition: int, new_next: int, progress: Progress) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        offsets = [TopicPartition(self.topic, partition, new_next, metadata=progress.encode())]
        try:
            self._producer.send_offsets_to_transaction(offsets, self._group_metadata, TIMEOUT_S)
        except KafkaException as exc:
            raise self._translate(exc, f"commit progress of {self.topic}-{partition}") from exc
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                self._producer.commit_transaction(TIMEOUT_S)
                self._in_txn = False
                return
            except KafkaException as exc:
                error = _kafka_error(exc)
                # A retriable commit error leaves the outcome open; committing again settles it.
                if error is not None and error.retriable() and attempt < COMMIT_ATTEMPTS:
                    continue
                raise self._translate(exc, f"commit transaction of {self.topic}-{partition}") from exc

    def abort_chunk(self) -> None:
        if not self._in_txn:
            return
        self._in_txn = False
        try:
            self._producer.abort_transaction(TIMEOUT_S)
        except Exception:  # noqa: BLE001 - best effort: the next run's init_transactions aborts it anyway
            pass

    def _translate(self, exc: BaseException, what: str) -> KafkaAdminError:
        return self._translate_error(_kafka_error(exc) or exc, what)

    def _translate_error(self, error: Any, what: str) -> KafkaAdminError:
        text = f"{what} on {self.bootstrap_servers}: {error}"
        if (
            hasattr(error, "txn_requires_abort")
            and (error.txn_requires_abort() or error.retriable())
            and not error.fatal()
        ):
            return ChunkAborted(text)
        return KafkaAdminError(text)


def committed_progress(
    bootstrap_servers: str, group: str, topic: str, partitions: Iterable[int]
) -> dict[int, tuple[int, str | None]]:
    """The committed progress without fencing anyone (``--dry-run``); a commit still in flight is not
    waited for (read_uncommitted does not ask for stable offsets)."""
    from confluent_kafka import Consumer, KafkaException

    try:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": group,
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
            }
        )
    except KafkaException as exc:
        raise KafkaAdminError(
            f"cannot read restore progress of {group} on {bootstrap_servers}: {exc}"
        ) from exc
    try:
        return _committed(consumer, topic, partitions, bootstrap_servers)
    finally:
        consumer.close()


def _committed(
    consumer: Any, topic: str, partitions: Iterable[int], bootstrap_servers: str
) -> dict[int, tuple[int, str | None]]:
    # Through a consumer, not the Admin API: librdkafka's admin ListConsumerGroupOffsets dereferences a
    # missing consumer group handle when the coordinator answers NOT_COORDINATOR or "load in progress"
    # (a fresh or restarted broker) and crashes the process (librdkafka issue 5040).
    import time

    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    # Transient while __consumer_offsets loads or moves, or (stable reads) while a commit settles.
    busy = {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
    }
    request = [TopicPartition(topic, p) for p in partitions]
    if not request:
        return {}
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            answered = consumer.committed(request, timeout=TIMEOUT_S)
            errors = [tp.error for tp in answered if tp.error is not None]
        except KafkaException as exc:
            errors = [_kafka_error(exc) or exc]
        if not errors:
            break
        if hasattr(errors[0], "code") and errors[0].code() in busy and time.monotonic() < deadline:
            time.sleep(0.25)
            continue
        raise KafkaAdminError(f"read restore progress of {topic} on {bootstrap_servers}: {errors[0]}")
    return {tp.partition: (int(tp.offset), tp.metadata or None) for tp in answered if tp.offset >= 0}
