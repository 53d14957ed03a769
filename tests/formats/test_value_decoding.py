"""Value decoding without Spark: Avro schemas as column types, a new schema id's fields reported as
missing, undecodable values kept with a reason, and the schema registry client against a registry's
REST API (tests/harness/schema_registry.py), including what it must not take for "unknown schema"."""

from __future__ import annotations

import datetime as dt
import io
import json
import socket
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from harness.schema_registry import tiny_registry
from storage_core.adapters.schema_registry import SchemaRegistry
from storage_core.errors import ConfigError
from storage_core.formats.value_decoding import (
    AvroDecoder,
    JsonDecoder,
    RegisteredSchema,
    SchemaUnavailable,
    ValueDecoding,
    _names,
    avro_to_arrow,
    decode_values,
    missing_fields,
)

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {
            "name": "price",
            "type": {
                "type": "fixed",
                "name": "P",
                "size": 4,
                "logicalType": "decimal",
                "precision": 8,
                "scale": 2,
            },
        },
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "other", "type": ["null", "Kind"]},
        {"name": "attrs", "type": {"type": "map", "values": "double"}},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {"type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"}]},
            },
        },
    ],
}


def _wire(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return struct.pack(">bI", 0, schema_id) + out.getvalue()


def test_avro_types_become_column_types() -> None:
    kind = avro_to_arrow(ORDER, {})
    assert kind == pa.struct(
        [
            pa.field("id", pa.int64()),
            pa.field("price", pa.decimal128(8, 2)),
            pa.field("day", pa.date32()),
            pa.field("at", pa.timestamp("us", tz="UTC")),
            pa.field("kind", pa.string()),
            pa.field("other", pa.string()),
            pa.field("attrs", pa.map_(pa.string(), pa.float64())),
            pa.field("lines", pa.list_(pa.struct([pa.field("sku", pa.string())]))),
        ]
    )


def test_a_new_schema_id_reports_its_new_fields_and_bad_values_keep_a_reason() -> None:
    v2 = {
        **ORDER,
        "fields": [*ORDER["fields"], {"name": "note", "type": ["null", "string"], "default": None}],
    }
    union = {"type": "record", "name": "U", "fields": [{"name": "x", "type": ["int", "string"]}]}
    schemas = {1: ORDER, 2: v2, 3: union}
    lookups: list[int] = []

    def lookup(schema_id: int) -> RegisteredSchema | None:
        import json

        lookups.append(schema_id)
        return RegisteredSchema("AVRO", json.dumps(schemas[schema_id])) if schema_id in schemas else None

    record = {
        "id": 1,
        "price": Decimal("12.50"),
        "day": dt.date(2026, 1, 2),
        "at": dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
        "kind": "B",
        "other": None,
        "attrs": {"w": 1.5},
        "lines": [{"sku": "s1"}],
    }
    values = [
        _wire(1, ORDER, record),
        _wire(2, v2, {**record, "id": 2, "note": "hi"}),
        _wire(1, ORDER, {**record, "id": 3}),
        _wire(7, ORDER, record),
        _wire(3, union, {"x": 1}),
        None,
        _wire(1, ORDER, record) + b"\x00",
    ]
    table_type = avro_to_arrow(ORDER, {})
    out = decode_values(values, AvroDecoder(lookup), table_type)
    assert out.missing == pa.struct([pa.field("note", pa.string())])
    assert sorted(lookups) == [1, 2, 3, 7], "each schema id looked up once"
    decoded = out.decoded.to_pylist()
    as_arrow = {**record, "attrs": [("w", 1.5)]}  # Arrow's maps read back as (key, value) pairs
    assert decoded[0] == as_arrow and decoded[2] == {**as_arrow, "id": 3}
    assert decoded[1] == {**as_arrow, "id": 2}, "written without the new field..."
    errors = out.errors.to_pylist()
    assert errors[1] == "fields not in the table's schema: note", "...and never silently"
    assert errors[3] == "schema id 7 is not in the schema registry" and decoded[3] is None
    assert "union of 2 non-null types" in errors[4]
    assert errors[0] is None and errors[5] is None and decoded[5] is None
    assert errors[6] == "Avro body does not match schema 1: 1 bytes after it" and decoded[6] is None

    widened = pa.struct([*table_type, pa.field("note", pa.string())])
    again = decode_values(values, AvroDecoder(lookup), widened)
    assert again.missing is None and again.decoded.to_pylist()[1]["note"] == "hi"


def test_value_decoding_config_wants_a_registry_for_avro_only() -> None:
    with pytest.raises(ConfigError):
        ValueDecoding("avro")
    with pytest.raises(ConfigError):
        ValueDecoding("json", "http://registry")


def test_the_registry_client_against_the_rest_api() -> None:
    with tiny_registry(user_info="u:p") as registry:
        schema_id = registry.register(ORDER)
        client = SchemaRegistry(registry.url, "u:p")
        found = client(schema_id)
        assert found is not None and found.schema_type == "AVRO" and '"Order"' in found.text
        assert client(999) is None, "40403: the registry has no such schema"
        with pytest.raises(SchemaUnavailable, match="HTTP 401"):
            SchemaRegistry(registry.url)(schema_id)
        # A 404 that is not the registry's "schema not found" (a wrong URL path) fails the run instead
        # of writing every value off as undecodable.
        with pytest.raises(SchemaUnavailable, match="HTTP 404"):
            SchemaRegistry(registry.url + "/wrong", "u:p")(schema_id)
        assert "u:p" not in repr(client)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SchemaUnavailable, match="schema registry http://127.0.0.1"):
        SchemaRegistry(f"http://127.0.0.1:{port}", timeout_s=5)(1)


def test_new_fields_inside_lists_and_maps_of_a_table_read_back_are_missing(tmp_path: Path) -> None:
    """The table's type as read back from Iceberg (large lists and strings) still shows a new field in a
    list's or a map's records as missing: pyarrow would otherwise drop it without a word."""
    from storage_core.spark.iceberg_catalog import open_table
    from storage_core.spark.iceberg_table import add_decoded_columns, decoded_type
    from storage_core.spark.options import StorageSpec

    def shape(line: list[tuple[str, pa.DataType]], by: list[tuple[str, pa.DataType]]) -> pa.StructType:
        return pa.struct([("lines", pa.list_(pa.struct(line))), ("by", pa.map_(pa.string(), pa.struct(by)))])

    first = shape([("sku", pa.string())], [("n", pa.int64())])
    table = open_table(StorageSpec(f"file://{tmp_path / 't'}"), "t", "AAAAAAAAAAAAAAAAAAAAAA", "t.t", None)
    add_decoded_columns(table, missing_fields(None, first))
    have = decoded_type(table.metadata)
    assert have is not None and missing_fields(have, first) is None
    later = shape([("sku", pa.string()), ("qty", pa.int64())], [("n", pa.int64()), ("m", pa.int64())])
    assert _names(missing_fields(have, later)) == "lines.qty, by.m"
    value = json.dumps({"lines": [{"sku": "b", "qty": 2}]}).encode()
    out = decode_values([value], JsonDecoder(), have)
    assert out.errors.to_pylist() == ["fields not in the table's schema: lines.qty"]
    add_decoded_columns(table, missing_fields(have, later))
    again = decode_values([value], JsonDecoder(), decoded_type(table.metadata))
    assert again.missing is None and again.errors.to_pylist() == [None]
    assert again.decoded.to_pylist()[0]["lines"] == [{"sku": "b", "qty": 2}]
