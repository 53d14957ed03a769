"""``tierkeeper table-maintenance``: compact small files, expire old snapshots and delete orphan files of an
exported Iceberg table (jobs/table_maintenance.py says what each step keeps)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from storage_core.api.resources import (
    DEFAULT_COMPACT_MIN_FILES,
    DEFAULT_KEEP_SNAPSHOTS,
    DEFAULT_ORPHAN_MIN_AGE_S,
    DEFAULT_SNAPSHOT_MAX_AGE_S,
)
from storage_core.cli.common import (
    add_remote_args,
    add_result_file_arg,
    emit_json,
    storage_options,
    write_result_file,
)
from storage_core.cli.export import add_table_args, add_target_args, catalog_config, target_options


def _days(seconds: int) -> str:
    return f"{seconds // 86_400} days"


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
        default=DEFAULT_KEEP_SNAPSHOTS,
        metavar="N",
        help=f"newest snapshots always kept (default {DEFAULT_KEEP_SNAPSHOTS})",
    )
    p.add_argument(
        "--snapshot-max-age-ms",
        type=int,
        default=DEFAULT_SNAPSHOT_MAX_AGE_S * 1000,
        metavar="MS",
        help="expire snapshots older than this, past the newest N "
        f"(default {_days(DEFAULT_SNAPSHOT_MAX_AGE_S)})",
    )
    p.add_argument(
        "--orphan-min-age-ms",
        type=int,
        default=DEFAULT_ORPHAN_MIN_AGE_S * 1000,
        metavar="MS",
        help="delete an unreferenced file (or a metadata file past write.metadata.previous-versions-max) "
        f"only once older than this; longer than any export run (default {_days(DEFAULT_ORPHAN_MIN_AGE_S)})",
    )
    p.add_argument(
        "--compact-min-files",
        type=int,
        default=DEFAULT_COMPACT_MIN_FILES,
        metavar="N",
        help="rewrite a table partition's small files into one once there are N; 0: none "
        f"(default {DEFAULT_COMPACT_MIN_FILES})",
    )
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    add_result_file_arg(p)
    add_remote_args(p, required=False)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import time

    from storage_core.errors import ConfigError, TierkeeperError
    from storage_core.jobs.table_maintenance import run_table_maintenance
    from storage_core.jobs.table_runs import maintenance_inputs
    from storage_core.reconcile.requests import (
        MaintenancePolicy,
        RemoteTier,
        TableMaintenanceRequest,
        TableTarget,
    )
    from storage_core.reconcile.results import encode_table
    from storage_core.spark.options import StorageSpec

    try:
        policy = MaintenancePolicy.from_args(args)
        for field in dataclasses.fields(policy):
            value = getattr(policy, field.name)
            if value < (1 if field.name == "keep_snapshots" else 0):
                raise ConfigError(f"--{field.name.replace('_', '-')} must not be {value}")
        if args.catalog and not args.table:
            raise ConfigError("--catalog needs --table (the name of the table in that catalog)")
        catalog = catalog_config(args)
        source = storage_options(args)
        if not args.remote:
            args.remote = args.to  # the storage flags and environment are the table's own
        # The table's name and the options as standalone mode has them from the same request; the target
        # and catalog as the flags give them (--to-storage-option, checked catalog properties).
        request = TableMaintenanceRequest(RemoteTier(args.remote), TableTarget.from_args(args), policy)
        _, table_name, _, options = maintenance_inputs(request, source, int(time.time() * 1000))
        target = StorageSpec(args.to, target_options(args, source))
        summary = run_table_maintenance(target, table_name, catalog, options)
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
