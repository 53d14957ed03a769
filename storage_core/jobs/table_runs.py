"""An export or table maintenance request (:mod:`storage_core.reconcile.requests`) run in this process:
what standalone mode does where the operator starts a Job whose command parses the same request back."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any, cast

from storage_core.formats.value_decoding import ValueDecoding, ValueFormat
from storage_core.reconcile.requests import ExportRequest, TableMaintenanceRequest, TableTarget
from storage_core.spark.iceberg_catalog import CatalogConfig
from storage_core.spark.options import StorageSpec


def table_storage(location: str, remote_url: str, remote_options: Mapping[str, Any]) -> dict[str, Any]:
    """The table's storage options when none are given for it: the remote tier's when the scheme is the
    same (one bucket's credentials), none otherwise."""
    same_scheme = location.split("://", 1)[0] == remote_url.split("://", 1)[0]
    return dict(remote_options) if same_scheme else {}


def catalog_of(table: TableTarget) -> CatalogConfig | None:
    return CatalogConfig(table.catalog, dict(table.catalog_properties)) if table.catalog else None


def export_inputs(request: ExportRequest, remote_options: Mapping[str, Any]) -> tuple[Any, ...]:
    """(source, target, scan options, table name, catalog) as ``run_export_iceberg`` takes them."""
    from storage_core.remote.reader import Isolation
    from storage_core.remote.scan_plan import DEFAULT_SPLIT_BYTES
    from storage_core.spark.options import ScanOptions

    source = StorageSpec(request.remote.url, dict(remote_options))
    target = StorageSpec(
        request.table.location, table_storage(request.table.location, request.remote.url, remote_options)
    )
    opts = ScanOptions(
        storage=source,
        topic=request.topic,
        isolation=Isolation(request.isolation),
        max_split_bytes=DEFAULT_SPLIT_BYTES,
    )
    return source, target, opts, request.table.name, catalog_of(request.table)


def value_decoding_of(request: ExportRequest) -> ValueDecoding | None:
    if request.value_format is None:
        return None
    return ValueDecoding(cast(ValueFormat, request.value_format), request.schema_registry)


def maintenance_inputs(
    request: TableMaintenanceRequest, remote_options: Mapping[str, Any], now_ms: int
) -> tuple[Any, ...]:
    """(target, table name, catalog, options) as ``run_table_maintenance`` takes them."""
    from storage_core.jobs.table_maintenance import MaintenanceOptions

    target = StorageSpec(
        request.table.location, table_storage(request.table.location, request.remote.url, remote_options)
    )
    options = MaintenanceOptions(**dataclasses.asdict(request.policy), now_ms=now_ms)
    return target, request.table.name or "tierkeeper.table", catalog_of(request.table), options


def run_table_request(
    request: ExportRequest | TableMaintenanceRequest, remote_options: Mapping[str, Any]
) -> dict[str, Any]:
    """Run the request; its summary as the command's ``--json`` prints it."""
    if isinstance(request, TableMaintenanceRequest):
        from storage_core.jobs.table_maintenance import run_table_maintenance

        return dataclasses.asdict(
            run_table_maintenance(*maintenance_inputs(request, remote_options, int(time.time() * 1000)))
        )
    from storage_core.jobs.export_iceberg import run_export_iceberg
    from storage_core.jobs.spark_session import job_spark_session

    source, target, opts, name, catalog = export_inputs(request, remote_options)
    decoding = value_decoding_of(request)
    with job_spark_session("tierkeeper-export", request.spark.master, dict(request.spark.conf)) as spark:
        summary = run_export_iceberg(
            spark, source, target, opts, table_name=name, catalog=catalog, value_decoding=decoding
        )
    return dataclasses.asdict(summary)
