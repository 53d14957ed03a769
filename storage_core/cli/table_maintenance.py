"""``tierkeeper table-maintenance``: compact small files, expire old snapshots and delete orphan files of an
exported Iceberg table (jobs/table_maintenance.py says what each step keeps)."""

from __future__ import annotations

import argparse
import dataclasses

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
from storage_core.cli.subcommand import Subcommand


def _add_age_arg(p: argparse.ArgumentParser, flag: str, default_s: int, help: str) -> None:
    """An age in milliseconds, as the maintenance policy has it, whose default (a whole number of days)
    the help shows in days."""
    p.add_argument(
        flag,
        type=int,
        default=default_s * 1000,
        metavar="MS",
        help=f"{help} (default {default_s // 86_400} days)",
    )


def add_args(p: argparse.ArgumentParser) -> None:
    add_target_args(p, "the table's directory (export's --to)", "the table")
    add_table_args(p)
    p.add_argument(
        "--keep-snapshots",
        type=int,
        default=DEFAULT_KEEP_SNAPSHOTS,
        metavar="N",
        help=f"newest snapshots always kept (default {DEFAULT_KEEP_SNAPSHOTS})",
    )
    _add_age_arg(
        p,
        "--snapshot-max-age-ms",
        DEFAULT_SNAPSHOT_MAX_AGE_S,
        "expire snapshots older than this, past the newest N",
    )
    _add_age_arg(
        p,
        "--orphan-min-age-ms",
        DEFAULT_ORPHAN_MIN_AGE_S,
        "delete an unreferenced file (or a metadata file past write.metadata.previous-versions-max) only "
        "once older than this; longer than any export run",
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


COMMAND = Subcommand(
    "table-maintenance",
    help="compact, expire snapshots of and remove orphan files and old metadata files from an exported "
    "Iceberg table",
    add_args=add_args,
    run=run,
)
