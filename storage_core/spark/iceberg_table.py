"""The Iceberg table of a topic's history: its schema (the Kafka source's columns), its partitioning, and
the export's bookkeeping, which lives in the table itself.

Partitioned by ``day(timestamp)`` and ``partition``: time-range queries prune by day, per-partition reads by
partition, and a file never spans two days or two Kafka partitions. The committed position is in the
summary of the snapshot an export commits: ``tierkeeper.next-offsets`` = ``{"<partition>": next offset}``
(JSON), every record below it is in the table, none at or above it. A snapshot another writer commits
(compaction, an expiry) carries no such property, so the position is that of the newest snapshot in the
current snapshot's ancestry that does.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from storage_core.api.resources import default_table_name as default_table_name
from storage_core.errors import ConfigError

NEXT_OFFSETS = "tierkeeper.next-offsets"
# Added by the first export that decodes values: the typed fields (a struct the export widens as new
# fields appear) and why a value is not in them (null when it is). The raw ``value`` always stays.
DECODED = "value_decoded"
DECODE_ERROR = "value_error"
TOPIC = "tierkeeper.topic"
TOPIC_ID = "tierkeeper.topic-id"

# Ids are part of the table's format: data files name columns by id. Never renumber.
SCHEMA = Schema(
    NestedField(1, "key", BinaryType(), required=False),
    NestedField(2, "value", BinaryType(), required=False),
    NestedField(3, "topic", StringType(), required=False),
    NestedField(4, "partition", IntegerType(), required=False),
    NestedField(5, "offset", LongType(), required=False),
    NestedField(6, "timestamp", TimestamptzType(), required=False),
    NestedField(7, "timestampType", IntegerType(), required=False),
    NestedField(
        8,
        "headers",
        ListType(
            9,
            StructType(
                NestedField(10, "key", StringType(), required=False),
                NestedField(11, "value", BinaryType(), required=False),
            ),
            element_required=False,
        ),
        required=False,
    ),
)

DAY_FIELD = "timestamp_day"
PARTITION_FIELD = "partition"
SPEC = PartitionSpec(
    PartitionField(source_id=6, field_id=1000, transform=DayTransform(), name=DAY_FIELD),
    PartitionField(source_id=4, field_id=1001, transform=IdentityTransform(), name=PARTITION_FIELD),
)

TABLE_PROPERTIES = {
    "format-version": "2",
    # Readers such as Spark ask for files of this size when they compact; the export writes one file per
    # split and day, up to this size.
    "write.target-file-size-bytes": str(512 << 20),
    # Every commit writes a metadata file. Configured catalogs delete those that fall out of the metadata
    # log at commit time (pyiceberg, when enabled); table maintenance deletes them for every catalog, the
    # embedded one included, once old enough. Iceberg's defaults would keep them all.
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}


def decoded_type(metadata: Any) -> pa.StructType | None:
    """The Arrow type of the table's decoded-value column, None before the first decoded field."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = metadata.schema()
    try:
        field = schema.find_field(DECODED)
    except ValueError:
        return None
    kind = schema_to_pyarrow(Schema(field)).field(DECODED).type
    return kind if pa.types.is_struct(kind) else None


def add_decoded_columns(table: Any, missing: pa.StructType | None) -> None:
    """One schema commit: the error column if absent, and the decoded fields ``missing`` names (new
    fields of the decoded struct, nested ones under their parents), all optional. Raises pyiceberg's
    CommitFailedException when another writer changed the table meanwhile."""
    schema = table.metadata.schema()
    has_error = DECODE_ERROR in {f.name for f in schema.fields}
    if has_error and missing is None:
        return
    with table.update_schema() as update:
        if not has_error:
            update.add_column(DECODE_ERROR, StringType(), doc="why value is not decoded into value_decoded")
        if missing is not None:
            update.union_by_name(pa.schema([pa.field(DECODED, missing)]))


def summary_properties(topic: str, topic_id: str, next_offsets: dict[int, int]) -> dict[str, str]:
    return {
        TOPIC: topic,
        TOPIC_ID: topic_id,
        NEXT_OFFSETS: json.dumps({str(p): o for p, o in sorted(next_offsets.items())}, separators=(",", ":")),
    }


def committed_offsets(metadata: Any, topic: str, topic_id: str) -> dict[int, int]:
    """The committed position of ``metadata`` (a pyiceberg TableMetadata): the newest export snapshot in
    the current ancestry; ``{}`` for a table no export has committed to."""
    snapshot_id = metadata.current_snapshot_id
    while snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            # Expired away: the position is unknown, and exporting from 0 would duplicate every row.
            raise ConfigError(
                f"table {metadata.location}: snapshot {snapshot_id} of the current ancestry is expired "
                "before any export snapshot was found; keep at least the last export snapshot"
            )
        summary = snapshot.summary
        raw = summary.get(NEXT_OFFSETS) if summary is not None else None
        if raw is not None:
            found = (summary.get(TOPIC), summary.get(TOPIC_ID))
            if found != (topic, topic_id):
                raise ConfigError(
                    f"table {metadata.location} holds topic {found[0]} ({found[1]}), "
                    f"not {topic} ({topic_id}); export each topic (incarnation) to its own table"
                )
            return {int(p): int(o) for p, o in json.loads(raw).items()}
        snapshot_id = snapshot.parent_snapshot_id
    return {}


def check_topic(properties: dict[str, str], location: str, topic: str, topic_id: str) -> None:
    """A table created for another topic (incarnation) is refused before anything is written to it."""
    found = (properties.get(TOPIC), properties.get(TOPIC_ID))
    if found != (None, None) and found != (topic, topic_id):
        raise ConfigError(
            f"table {location} was created for topic {found[0]} ({found[1]}), not {topic} ({topic_id}); "
            "export each topic (incarnation) to its own table"
        )
