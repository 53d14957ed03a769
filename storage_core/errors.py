"""Error types of the storage core.

Adapters translate third-party exceptions into these, so entry points can print one clear line and
exit non-zero without knowing which library failed.

Layer: errors (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""

from __future__ import annotations


class TierkeeperError(Exception):
    """Base of every error Tierkeeper raises on purpose; its message is the one line a user sees."""


class ConfigError(TierkeeperError):
    """Bad input from the user: a flag, a file or a custom resource that cannot be used."""


class CorruptDataError(TierkeeperError):
    """Bytes that fail validation (CRC, framing, length); names where the damage is."""

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        path: str | None = None,
    ) -> None:
        where = []
        if topic is not None:
            where.append(f"topic={topic}")
        if partition is not None:
            where.append(f"partition={partition}")
        if offset is not None:
            where.append(f"offset={offset}")
        if path is not None:
            where.append(f"file={path}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.path = path


class DivergentDataError(CorruptDataError):
    """Two stored copies of the same offsets disagree (e.g. after an unclean leader election); Tierkeeper
    refuses to choose between them."""


class RemoteStoreError(TierkeeperError):
    """The remote tier could not be reached or answered with an error."""


class KafkaAdminError(TierkeeperError):
    """A Kafka Admin API call failed."""


class RemoteObjectNotFound(RemoteStoreError):
    """A remote key does not exist (deleted by retention, never finished, or a wrong URL)."""


class OffsetOutOfRangeError(TierkeeperError):
    """A read asked for an offset or timestamp the remote tier does not hold."""


class DataLossError(TierkeeperError):
    """A stream's planned offsets are no longer in the remote tier (failOnDataLoss=true)."""
