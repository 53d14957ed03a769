"""Kafka record values decoded into typed columns: JSON objects, or Avro in the Confluent wire format
(byte 0, a 4-byte big-endian schema id, the Avro body written with that schema).

No I/O of its own: the schemas come from a lookup the caller hands in (adapters/schema_registry.py's talks
to the registry). A value decodes into a Python dict plus its Arrow struct type (the writer schema's for Avro,
inferred for JSON); ``decode_values`` conforms a column of values to the table's struct type and says
which fields the table lacks, so the export can evolve the table's schema and write the values again. A
value that cannot be decoded, or does not fit the table's types, is never dropped: its row keeps the raw
``value`` and gets the reason in the error column.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from storage_core.errors import ConfigError, TierkeeperError

ValueFormat = Literal["json", "avro"]
MAGIC = 0
_HEADER = struct.Struct(">bI")


@dataclass(frozen=True)
class ValueDecoding:
    """How an export decodes values: ``json``, or ``avro`` with the schema registry at ``schema_registry``."""

    format: ValueFormat
    schema_registry: str | None = None

    def __post_init__(self) -> None:
        if (self.format == "avro") != (self.schema_registry is not None):
            raise ConfigError("value decoding: a schema registry URL goes with avro, and only with avro")


class UndecodableValue(Exception):
    """One value could not be decoded; its message is what the row's error column says."""


class SchemaUnavailable(TierkeeperError):
    """The schema registry could not answer (not: it answered that a schema id is unknown)."""


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it: its type (AVRO when the registry leaves it out) and text."""

    schema_type: str
    text: str
    references: bool = False
    """It names other schemas (schema references), which decoding does not follow."""


SchemaLookup = Callable[[int], RegisteredSchema | None]
"""Schema id -> the registered schema, or None when the registry has no such id; raises
``SchemaUnavailable`` when the registry cannot be asked."""


@dataclass(frozen=True)
class DecodedValues:
    """A column of values conformed to the table's type. ``decoded`` is None when ``table_type`` was None
    (the table has no decoded column yet). ``missing`` is a struct type of the fields (nested ones under
    their parents) that values carry and ``table_type`` lacks, None when it lacks none."""

    decoded: pa.StructArray | None
    errors: pa.StringArray
    missing: pa.StructType | None


class JsonDecoder:
    """A value is one JSON object; its types are inferred (integers long, other numbers double)."""

    def decode(self, value: bytes) -> tuple[dict[str, Any], pa.StructType]:
        try:
            obj = json.loads(value)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UndecodableValue(f"not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise UndecodableValue(f"JSON {type(obj).__name__}, not an object")
        try:
            kind = pa.array([obj]).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise UndecodableValue(
                f"JSON with mixed types in one array or an integer out of range: {exc}"
            ) from None
        return obj, kind


class AvroDecoder:
    """Confluent's wire format; each schema id is looked up once per decoder."""

    def __init__(self, lookup: SchemaLookup) -> None:
        self.lookup = lookup
        self._schemas: dict[int, tuple[Any, pa.StructType] | str] = {}

    def decode(self, value: bytes) -> tuple[dict[str, Any], pa.StructType]:
        import fastavro

        if len(value) < _HEADER.size or value[0] != MAGIC:
            raise UndecodableValue(
                "not in the schema registry's wire format (magic byte 0, 4-byte schema id)"
            )
        _, schema_id = _HEADER.unpack_from(value)
        schema = self._schema(schema_id)
        if isinstance(schema, str):
            raise UndecodableValue(schema)
        parsed, kind = schema
        body = io.BytesIO(value[_HEADER.size :])
        try:
            obj = fastavro.schemaless_reader(body, parsed, None)
        except Exception as exc:  # noqa: BLE001 -- fastavro raises many types for a corrupt body
            raise UndecodableValue(f"Avro body does not match schema {schema_id}: {exc!r}") from None
        left = len(value) - _HEADER.size - body.tell()
        if left:
            raise UndecodableValue(f"Avro body does not match schema {schema_id}: {left} bytes after it")
        if not isinstance(obj, dict):  # _load admits records only
            raise UndecodableValue(f"schema id {schema_id} is not an Avro record")
        return obj, kind

    def _schema(self, schema_id: int) -> tuple[Any, pa.StructType] | str:
        """The parsed schema and its Arrow type, or why records of this id cannot be decoded."""
        found = self._schemas.get(schema_id)
        if found is None:
            found = self._schemas[schema_id] = self._load(schema_id)
        return found

    def _load(self, schema_id: int) -> tuple[Any, pa.StructType] | str:
        import fastavro

        registered = self.lookup(schema_id)
        if registered is None:
            return f"schema id {schema_id} is not in the schema registry"
        if registered.schema_type.upper() != "AVRO":
            return f"schema id {schema_id} is {registered.schema_type}, not Avro"
        if registered.references:
            return f"schema id {schema_id} uses schema references, which are not supported"
        try:
            raw = json.loads(registered.text)
            parsed = fastavro.parse_schema(raw)
            kind = avro_to_arrow(raw, {})
        except (ValueError, TypeError, KeyError, UnsupportedSchema) as exc:
            return f"schema id {schema_id}: {exc}"
        if not pa.types.is_struct(kind):
            return f"schema id {schema_id} is not an Avro record"
        return parsed, kind


class UnsupportedSchema(Exception):
    pass


_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def avro_to_arrow(schema: Any, names: dict[str, pa.DataType]) -> pa.DataType:
    """The Arrow type of an Avro schema (JSON form); every field nullable, as the table's columns are.
    ``names`` collects named types (records, enums, fixed) for later references to them."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in names:
            return names[schema]
        raise UnsupportedSchema(f"unknown or recursive type {schema}")
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise UnsupportedSchema(
                f"a union of {len(branches)} non-null types ({schema}) has no column type"
            )
        return avro_to_arrow(branches[0], names)
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return _named(schema, names, pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0))))
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in ("time-millis", "time-micros"):
        return pa.time64("us")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return pa.timestamp("us")
    if kind == "record":
        fields = [pa.field(f["name"], avro_to_arrow(f["type"], names)) for f in schema["fields"]]
        return _named(schema, names, pa.struct(fields))
    if kind == "enum":
        return _named(schema, names, pa.string())
    if kind == "fixed":
        return _named(schema, names, pa.binary())
    if kind == "array":
        return pa.list_(avro_to_arrow(schema["items"], names))
    if kind == "map":
        return pa.map_(pa.string(), avro_to_arrow(schema["values"], names))
    return avro_to_arrow(kind, names)


def _named(schema: dict[str, Any], names: dict[str, pa.DataType], kind: pa.DataType) -> pa.DataType:
    name = schema.get("name")
    if name:
        namespace = schema.get("namespace")
        names[name] = kind
        if namespace and "." not in name:
            names[f"{namespace}.{name}"] = kind
    return kind


def _is_list(kind: pa.DataType) -> bool:
    # Types read from the table (pyiceberg's schema_to_pyarrow) are the large variants.
    return bool(pa.types.is_list(kind) or pa.types.is_large_list(kind))


def missing_fields(have: pa.DataType | None, want: pa.DataType) -> pa.DataType | None:
    """The part of ``want`` that ``have`` lacks (new struct fields, with their parents, also inside lists
    and map values), None when nothing. Fields of type null (a JSON null, an empty list) carry no type and
    are never missing."""
    if pa.types.is_null(want):
        return None
    if have is None:
        if pa.types.is_struct(want):
            fields = [pa.field(f.name, m) for f in want if (m := missing_fields(None, f.type)) is not None]
            return pa.struct(fields) if fields else None
        if _is_list(want):
            item = missing_fields(None, want.value_type)
            return pa.list_(item) if item is not None else None
        if pa.types.is_map(want):
            item = missing_fields(None, want.item_type)
            return pa.map_(want.key_type, item) if item is not None else None
        return want
    if pa.types.is_struct(want) and pa.types.is_struct(have):
        by_name = {f.name: f.type for f in have}
        fields = [
            pa.field(f.name, m)
            for f in want
            if (m := missing_fields(by_name.get(f.name), f.type)) is not None
        ]
        return pa.struct(fields) if fields else None
    if _is_list(want) and _is_list(have):
        item = missing_fields(have.value_type, want.value_type)
        return pa.list_(item) if item is not None else None
    if pa.types.is_map(want) and pa.types.is_map(have):
        item = missing_fields(have.item_type, want.item_type)
        return pa.map_(want.key_type, item) if item is not None else None
    return None  # present with another type: conforming the value says whether it fits


def merge_types(a: pa.DataType | None, b: pa.DataType | None) -> pa.DataType | None:
    """The union of two ``missing_fields`` results; on a conflict the first type wins."""
    if a is None or b is None:
        return a if b is None else b
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        mine, theirs = {f.name for f in a}, {g.name: g.type for g in b}
        fields = [pa.field(f.name, merge_types(f.type, theirs.get(f.name))) for f in a]
        fields += [f for f in b if f.name not in mine]
        return pa.struct(fields)
    if _is_list(a) and _is_list(b):
        return pa.list_(merge_types(a.value_type, b.value_type))
    if pa.types.is_map(a) and pa.types.is_map(b):
        return pa.map_(a.key_type, merge_types(a.item_type, b.item_type))
    return a


def decode_values(
    values: Sequence[bytes | None],
    decoder: JsonDecoder | AvroDecoder,
    table_type: pa.StructType | None,
) -> DecodedValues:
    """Decode every value and conform it to ``table_type``. A null value (a tombstone) decodes to null
    with no error. A value with fields ``table_type`` lacks is conformed without them; the caller either
    evolves the table (``missing``) and decodes again, or keeps the row with those fields named in its
    error."""
    objs: list[dict[str, Any] | None] = []
    errors: list[str | None] = []
    missing: pa.DataType | None = None
    seen: dict[pa.DataType, pa.DataType | None] = {}
    for value in values:
        if value is None:
            objs.append(None)
            errors.append(None)
            continue
        try:
            obj, kind = decoder.decode(value)
        except UndecodableValue as exc:
            objs.append(None)
            errors.append(str(exc))
            continue
        if kind not in seen:
            seen[kind] = missing_fields(table_type, kind)
        lacks = seen[kind]
        missing = merge_types(missing, lacks)
        objs.append(obj)
        errors.append(f"fields not in the table's schema: {_names(lacks)}" if lacks is not None else None)
    if table_type is None:
        return DecodedValues(None, pa.array(errors, pa.string()), _struct_or_none(missing))
    decoded = _conform(objs, errors, table_type)
    return DecodedValues(decoded, pa.array(errors, pa.string()), _struct_or_none(missing))


def _conform(
    objs: list[dict[str, Any] | None], errors: list[str | None], kind: pa.StructType
) -> pa.StructArray:
    """One struct array of the table's type; a value that does not fit it becomes null with the reason in
    ``errors`` (fast path: the whole column at once; only if that fails, value by value)."""
    try:
        return pa.array(objs, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        pass
    parts = []
    for i, obj in enumerate(objs):
        try:
            parts.append(pa.array([obj], type=kind))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
            parts.append(pa.nulls(1, kind))
            errors[i] = f"does not fit the table's column types: {exc}"
    return pa.concat_arrays(parts) if parts else pa.array([], type=kind)


def _names(kind: pa.DataType | None, prefix: str = "") -> str:
    if kind is None:
        return ""
    if pa.types.is_struct(kind):
        return ", ".join(
            _names(f.type, f"{prefix}{f.name}.") if _nested(f.type) else f"{prefix}{f.name}" for f in kind
        )
    if _is_list(kind):
        return _names(kind.value_type, prefix)
    if pa.types.is_map(kind):
        return _names(kind.item_type, prefix)
    return prefix.rstrip(".")


def _nested(kind: pa.DataType) -> bool:
    return (
        pa.types.is_struct(kind)
        or (_is_list(kind) and _nested(kind.value_type))
        or (pa.types.is_map(kind) and _nested(kind.item_type))
    )


def _struct_or_none(kind: pa.DataType | None) -> pa.StructType | None:
    return kind if kind is not None and pa.types.is_struct(kind) else None
