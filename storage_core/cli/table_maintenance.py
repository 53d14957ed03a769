"""``tierkeeper table-maintenance``: compact small files, expire old snapshots and delete orphan files of an
exported Iceberg table (jobs/table_maintenance.py says what each step keeps)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from storage_core.cli.common import (
    add_remote_args,
    add_result_file_arg,
    emit_json,
    storage_options,
    write_result_file,
)
from storage_core.cli.export import add_table_args, add_target_args, catalog_config, target_options

_DAY_MS = 86_400_000


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "table-maintenance",
        help="compact, expire snapshots of and remove orphan files and old metadata files from an exported "
        "Iceberg table",
    )
    add_target_args(p, "the table's directory (export's --to)", "the table")
    add_table_args(p)
    p.add_argument(
        "--keep-snapshots",
        type=int,
        default=10,
        metavar="N",
        help="newest snapshots always kept (default 10)",
    )
    p.add_argument(
        "--snapshot-max-age-ms",
        type=int,
        default=7 * _DAY_MS,
        metavar="MS",
        help="expire snapshots older than this, past the newest N (default 7 days)",
    )
    p.add_argument(
        "--orphan-min-age-ms",
        type=int,
        default=3 * _DAY_MS,
        metavar="MS",
        help="delete an unreferenced file (or a metadata file past write.metadata.previous-versions-max) "
        "only once older than this; longer than any export run (default 3 days)",
    )
    p.add_argument(
        "--compact-min-files",
        type=int,
        default=8,
        metavar="N",
        help="rewrite a table partition's small files into one once there are N; 0: none (default 8)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    add_result_file_arg(p)
    add_remote_args(p, required=False)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import time

    from storage_core.errors import ConfigError, TierkeeperError
    from storage_core.jobs.table_maintenance import MaintenanceOptions, run_table_maintenance
    from storage_core.reconcile.results import encode_table
    from storage_core.spark.options import StorageSpec

    try:
        for name in ("keep_snapshots", "snapshot_max_age_ms", "orphan_min_age_ms", "compact_min_files"):
            if getattr(args, name) < (1 if name == "keep_snapshots" else 0):
                raise ConfigError(f"--{name.replace('_', '-')} must not be {getattr(args, name)}")
        if args.catalog and not args.table:
            raise ConfigError("--catalog needs --table (the name of the table in that catalog)")
        source = storage_options(args)
        if not args.remote:
            args.remote = args.to  # the storage flags and environment are the table's own
        target = StorageSpec(args.to, target_options(args, source))
        options = MaintenanceOptions(
            keep_snapshots=args.keep_snapshots,
            snapshot_max_age_ms=args.snapshot_max_age_ms,
            orphan_min_age_ms=args.orphan_min_age_ms,
            compact_min_files=args.compact_min_files,
            now_ms=int(time.time() * 1000),
        )
        # The embedded catalog is the directory: the name only labels the table there.
        summary = run_table_maintenance(
            target, args.table or "tierkeeper.table", catalog_config(args), options
        )
    except TierkeeperError as exc:
        if args.result_file:
            write_result_file(args.result_file, encode_table("maintain", None, str(exc)))
        raise
    report = dataclasses.asdict(summary)
    if args.result_file:
        write_result_file(args.result_file, encode_table("maintain", report))
    if args.json:
        emit_json(report)
    else:
        print(
            f"table {summary.location}: compacted {summary.files_compacted} files into "
            f"{summary.files_written}, expired {summary.expired_snapshots} snapshots, deleted "
            f"{summary.orphans_deleted} orphan files, {summary.metadata_files_deleted} old metadata files"
        )
    return 0
