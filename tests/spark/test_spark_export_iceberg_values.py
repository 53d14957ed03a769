"""``tierkeeper export --format iceberg --value-format json|avro``: values decoded into typed columns of
the table (``value_decoded``), the table's schema widened as new fields appear (a new Avro schema id in
the middle of the stream), and every value that cannot be decoded kept with its reason in
``value_error``: the table has a row for every record a consumer reads. The Avro schemas come from a
schema registry over its REST API (tests/harness/schema_registry.py: no real registry can be started
from the project's files on a fresh machine)."""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from storage.dataset import Dataset

from harness.kafka import KafkaCluster
from harness.schema_registry import tiny_registry

from .conftest import Tier, copy_to

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
V2 = {
    **V1,
    "fields": [
        *V1["fields"],
        {"name": "note", "type": ["null", "string"], "default": None},
        {
            "name": "address",
            "type": [
                "null",
                {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]},
            ],
            "default": None,
        },
    ],
}


def _avro(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    import fastavro

    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    return struct.pack(">bI", 0, schema_id) + body.getvalue()


def _order(i: int, *, v2: bool = False) -> dict[str, Any]:
    from decimal import Decimal

    order: dict[str, Any] = {
        "id": i,
        "customer": f"c{i % 7}",
        "amount": Decimal(f"{i}.25"),
        "at": dt.datetime(2026, 3, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=i),
        "tags": [f"t{i}"] * (i % 3),
    }
    if v2:
        order["note"] = f"n{i}" if i % 2 else None
        order["address"] = {"city": f"city{i}"}
    return order


def _topic(data: Dataset, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": data.bootstrap})
    config = {"internal.segment.bytes": "65536", "retention.ms": "-1"}
    for fut in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        fut.result(60)


def _produce(data: Dataset, topic: str, values: list[bytes | None]) -> None:
    """``values`` then two padding tombstones (40 KB keys, no value; the segments are 64 KB) of which the
    second rolls the segment, so the copy tiers every value before it. The tables have the paddings as
    rows with a null value (nothing to decode, no error)."""
    failed: list[Any] = []
    # Idempotent: the tables' rows by offset are compared with ``values`` in produce order.
    producer = Producer({"bootstrap.servers": data.bootstrap, "linger.ms": 0, "enable.idempotence": True})
    report = lambda err, _msg: err is not None and failed.append(err)  # noqa: E731
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=0, on_delivery=report)
    assert producer.flush(60) == 0
    for _ in range(2):
        producer.produce(topic, key=b"p" * 40_000, value=None, partition=0, on_delivery=report)
        assert producer.flush(60) == 0
    assert not failed, failed


def _export(spark: Any, tier: Tier, topic: str, location: str, decoding: Any) -> Any:
    from storage_core.jobs.export_iceberg import run_export_iceberg
    from storage_core.remote.reader import Isolation
    from storage_core.spark.options import ScanOptions, StorageSpec

    source, target = StorageSpec(tier.url), StorageSpec(location)
    opts = ScanOptions(storage=source, topic=topic, isolation=Isolation.READ_COMMITTED)
    return run_export_iceberg(spark, source, target, opts, value_decoding=decoding)


def _table_rows(location: str) -> list[dict[str, Any]]:
    """The table as pyiceberg reads it (no code of ours), by offset."""
    from pyiceberg.table import StaticTable

    root = Path(location.removeprefix("file://"))
    version = max(int(p.name[1:].split(".")[0]) for p in (root / "metadata").glob("v*.metadata.json"))
    table = StaticTable.from_metadata(f"{location}/metadata/v{version}.metadata.json")
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])


def test_avro_values_through_a_schema_registry_with_a_new_schema_mid_stream_and_undecodable_ones(
    tk_spark: Any, spark_dataset: Dataset, kafka_broker: KafkaCluster, file_tier: Tier, tmp_path: Path
) -> None:
    from storage_core.formats.value_decoding import SchemaUnavailable, ValueDecoding

    topic = "spark-iceberg-avro"
    _topic(spark_dataset, topic)
    location = f"file://{tmp_path / 'table'}"
    with tiny_registry(user_info="tk:registry-secret") as registry:
        decoding = ValueDecoding("avro", registry.url)
        id1 = registry.register(V1)
        first = [_avro(id1, V1, _order(i)) for i in range(20)]
        _produce(spark_dataset, topic, first)
        copy_to(file_tier, spark_dataset, kafka_broker, [topic])

        # The registry wants credentials (from the environment, as a Secret would give them): without
        # them the run fails with one line and commits nothing; no value is written off as undecodable.
        with pytest.raises(SchemaUnavailable, match="HTTP 401"):
            _export(tk_spark, file_tier, topic, location, decoding)
        assert not _table_rows_or_none(location)
        # (read on the driver when the run starts; the tasks get them inside the registry client)
        mp = pytest.MonkeyPatch()
        mp.setenv("SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO", "tk:registry-secret")
        try:
            one = _export(tk_spark, file_tier, topic, location, decoding)
            assert one.records == 21  # and the first padding

            # The producer moves to schema 2 (two new fields, one a nested record) mid-stream, an old
            # producer still writes schema 1, and some values are not decodable at all.
            id2 = registry.register(V2)
            second: list[bytes | None] = [_avro(id2, V2, _order(i, v2=True)) for i in range(20, 30)]
            second += [_avro(id1, V1, _order(i)) for i in range(30, 33)]
            bad = {
                b"\x01not the wire format": "wire format",
                struct.pack(">bI", 0, 999) + b"\x02": "schema id 999 is not in the schema registry",
                _avro(id2, V2, _order(40, v2=True))[:9]: "does not match schema",
                b"\x00": "wire format",
            }
            second += list(bad)
            _produce(spark_dataset, topic, second)
            copy_to(file_tier, spark_dataset, kafka_broker, [topic])
            two = _export(tk_spark, file_tier, topic, location, decoding)
        finally:
            mp.undo()
    rows = _table_rows(location)
    assert one.records + two.records == len(rows)
    assert [r["offset"] for r in rows] == list(range(len(rows))), "a row for every record"
    assert [r["value"] for r in rows if r["key"][:1] != b"p"] == [*first, *second], "the raw value stays"
    for padding in (r for r in rows if r["key"][:1] == b"p"):
        assert (padding["value"], padding["value_decoded"], padding["value_error"]) == (None, None, None)

    by_id = {r["value_decoded"]["id"]: r for r in rows if r["value_decoded"] is not None}
    assert sorted(by_id) == list(range(33))
    for i in range(33):
        want = _order(i, v2=20 <= i < 30)
        got = {k: v for k, v in by_id[i]["value_decoded"].items() if k in want}
        assert got == want, i
        assert by_id[i]["value_error"] is None
        if not 20 <= i < 30:
            assert by_id[i]["value_decoded"]["note"] is None and by_id[i]["value_decoded"]["address"] is None
    errors = {r["value"]: r["value_error"] for r in rows if r["value_error"] is not None}
    assert set(errors) == set(bad)
    for value, reason in bad.items():
        assert reason in errors[value], (value, errors[value])

    # Spark's own Iceberg reader sees the typed (and widened) columns.
    df = tk_spark.read.format("iceberg").load(location)
    cities = sorted(
        r["city"]
        for r in df.where("value_decoded.address IS NOT NULL").select("value_decoded.address.city").collect()
    )
    assert cities == sorted(f"city{i}" for i in range(20, 30))
    assert df.where("value_error IS NOT NULL").count() == len(bad)


def _table_rows_or_none(location: str) -> list[dict[str, Any]] | None:
    root = Path(location.removeprefix("file://")) / "metadata"
    if not any(root.glob("v*.metadata.json")):
        return None
    return _table_rows(location)


def test_json_values_widen_the_table_and_a_mismatch_is_kept_with_its_reason(
    tk_spark: Any, spark_dataset: Dataset, kafka_broker: KafkaCluster, file_tier: Tier, tmp_path: Path
) -> None:
    from storage_core.formats.value_decoding import ValueDecoding

    topic = "spark-iceberg-json"
    _topic(spark_dataset, topic)
    values: list[bytes | None] = [json.dumps({"user": f"u{i}", "n": i}).encode() for i in range(10)]
    values += [json.dumps({"user": "u10", "n": 10, "geo": {"lat": 1.5, "tags": ["a"]}}).encode()]
    bad = {
        b'{"user": "u11", "n": "eleven"}': "does not fit the table's column types",
        b"[1, 2]": "JSON list, not an object",
        b"{not json": "not JSON",
    }
    values += list(bad)
    _produce(spark_dataset, topic, values)
    copy_to(file_tier, spark_dataset, kafka_broker, [topic])
    location = f"file://{tmp_path / 'table'}"
    summary = _export(tk_spark, file_tier, topic, location, ValueDecoding("json"))
    rows = [r for r in _table_rows(location) if r["key"][:1] != b"p"]
    assert summary.records == len(values) + 1  # and the first padding
    assert [r["value"] for r in rows] == values
    decoded = [r["value_decoded"] for r in rows[:11]]
    assert decoded[:10] == [{"user": f"u{i}", "n": i, "geo": None} for i in range(10)]
    assert decoded[10] == {"user": "u10", "n": 10, "geo": {"lat": 1.5, "tags": ["a"]}}
    for row, reason in zip(rows[11:], bad.values(), strict=True):
        assert row["value_decoded"] is None and reason in row["value_error"], row
    df = tk_spark.read.format("iceberg").load(location)
    assert dict(df.select("value_decoded.*").dtypes) == {
        "user": "string",
        "n": "bigint",
        "geo": "struct<lat:double,tags:array<string>>",
    }
