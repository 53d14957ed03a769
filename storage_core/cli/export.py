"""``tierkeeper export``: a topic's remote tier as Parquet partitioned by partition and date (a Spark job)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from storage_core.cli.common import (
    add_remote_args,
    add_result_file_arg,
    emit_json,
    key_values,
    require_positive,
    storage_option_items,
    storage_options,
    write_result_file,
)
from storage_core.cli.spark_args import add_spark_args, spark_from_args
from storage_core.cli.subcommand import Subcommand


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True)
    p.add_argument("--topic-id", help="which incarnation, when a topic name was deleted and recreated")
    add_target_args(p, "target directory (file://, s3://, ...)", "the target")
    p.add_argument(
        "--format",
        choices=["parquet", "iceberg"],
        default="parquet",
        help="iceberg: an Apache Iceberg table committed once per run; parquet: files plus a state file",
    )
    add_table_args(p)
    p.add_argument(
        "--value-format",
        choices=["json", "avro"],
        help="iceberg: decode values into the column value_decoded (avro: Confluent wire format, schemas "
        "from --schema-registry); undecodable values keep their reason in value_error",
    )
    p.add_argument(
        "--schema-registry",
        metavar="URL",
        help="iceberg, --value-format avro: the schema registry (credentials: the environment variable "
        "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO=user:password)",
    )
    p.add_argument("--isolation", choices=["read_committed", "read_uncommitted"], default="read_committed")
    p.add_argument("--max-split-bytes", type=int, metavar="B", help="stored bytes per task (default 128 MiB)")
    p.add_argument(
        "--splits-per-commit", type=int, metavar="N", help="parquet: tasks per committed wave (default 64)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    add_result_file_arg(p)
    add_remote_args(p)
    add_spark_args(p)


def add_target_args(p: argparse.ArgumentParser, to_help: str, what: str) -> None:
    """``--to`` and its storage options (``export``, ``table-maintenance``; :func:`target_options` reads
    them)."""
    p.add_argument("--to", required=True, metavar="URL", help=to_help)
    p.add_argument(
        "--to-storage-option",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help=f"fsspec storage option for {what}; repeatable (default: the remote tier's, same scheme)",
    )


def add_table_args(p: argparse.ArgumentParser) -> None:
    """The flags naming an Iceberg table and its catalog (``export --format iceberg``,
    ``table-maintenance``)."""
    p.add_argument("--table", metavar="NS.NAME", help="iceberg: table name (default tierkeeper.<topic>)")
    p.add_argument(
        "--catalog",
        metavar="NAME",
        help="iceberg: a pyiceberg catalog configured by name (REST, Hive, Glue, SQL; see docs); "
        "default: the embedded catalog in the table's directory",
    )
    p.add_argument(
        "--catalog-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="iceberg: catalog property; repeatable (credentials belong in the environment)",
    )


def catalog_config(args: argparse.Namespace) -> Any:
    """The configured catalog the flags name, or None for the embedded one."""
    from storage_core.errors import ConfigError
    from storage_core.spark.iceberg_catalog import CatalogConfig

    if args.catalog_property and not args.catalog:
        raise ConfigError("--catalog-property needs --catalog (the embedded catalog takes no properties)")
    if not args.catalog:
        return None
    return CatalogConfig(args.catalog, key_values(args.catalog_property, "--catalog-property"))


def target_options(args: argparse.Namespace, source: dict[str, Any]) -> dict[str, Any]:
    """``--to-storage-option``s, or the remote tier's options when the scheme is the same."""
    from storage_core.jobs.table_runs import table_storage

    if not args.to_storage_option:
        return table_storage(args.to, args.remote, source)
    return storage_option_items(args.to_storage_option, "--to-storage-option")


def run(args: argparse.Namespace) -> int:
    from storage_core.jobs.export import DEFAULT_SPLITS_PER_COMMIT, run_export
    from storage_core.remote.reader import Isolation
    from storage_core.remote.scan_plan import DEFAULT_SPLIT_BYTES
    from storage_core.spark.options import ScanOptions, StorageSpec

    require_positive(args, "max_split_bytes", "splits_per_commit")
    source_options = storage_options(args)
    source = StorageSpec(args.remote, source_options)
    target = StorageSpec(args.to, target_options(args, source_options))
    opts = ScanOptions(
        storage=source,
        topic=args.topic,
        topic_id=args.topic_id,
        isolation=Isolation(args.isolation),
        max_split_bytes=args.max_split_bytes or DEFAULT_SPLIT_BYTES,
    )
    if args.format == "iceberg":
        return _run_iceberg(args, source, target, opts)
    if args.table or args.catalog or args.catalog_property or args.result_file or args.value_format:
        from storage_core.errors import ConfigError

        raise ConfigError(
            "--table, --catalog, --catalog-property, --value-format and --result-file need --format iceberg"
        )
    splits = args.splits_per_commit or DEFAULT_SPLITS_PER_COMMIT
    with spark_from_args(args, "tierkeeper-export") as spark:
        summary = run_export(spark, source, target, opts, splits_per_commit=splits)
    return _report(
        args,
        summary,
        f"exported {summary.records} records of {summary.topic} in {summary.splits} splits "
        f"(removed {summary.files_removed} files of an unfinished run)",
    )


COMMAND = Subcommand(
    "export",
    help="export a topic's remote tier to an Iceberg table or Parquet files, incrementally",
    add_args=add_args,
    run=run,
)


def _report(args: argparse.Namespace, summary: Any, line: str) -> int:
    if args.json:
        emit_json(dataclasses.asdict(summary))
    else:
        print(line)
    return 0


def _run_iceberg(args: argparse.Namespace, source: Any, target: Any, opts: Any) -> int:
    from storage_core.errors import TierkeeperError
    from storage_core.formats.value_decoding import ValueDecoding
    from storage_core.jobs.export_iceberg import run_export_iceberg
    from storage_core.reconcile.results import encode_table

    try:
        catalog = catalog_config(args)
        decoding = ValueDecoding(args.value_format, args.schema_registry) if args.value_format else None
        if args.schema_registry and decoding is None:
            ValueDecoding("json", args.schema_registry)  # refused with the reason
        with spark_from_args(args, "tierkeeper-export") as spark:
            summary = run_export_iceberg(
                spark, source, target, opts, table_name=args.table, catalog=catalog, value_decoding=decoding
            )
    except TierkeeperError as exc:
        if args.result_file:
            write_result_file(args.result_file, encode_table("export", None, str(exc)))
        raise
    if args.result_file:
        write_result_file(args.result_file, encode_table("export", dataclasses.asdict(summary)))
    return _report(
        args,
        summary,
        f"exported {summary.records} records of {summary.topic} to {summary.table} in {summary.files} "
        f"files (snapshot {summary.snapshot_id})",
    )
