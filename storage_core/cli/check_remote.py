"""``tierkeeper check-remote``: can this process reach the remote tier, and write and delete there? Run by
the operator as a TieredCluster's short bucket-check Job, with the credentials the copy Jobs get, so the
operator learns whether the bucket is reachable without ever reading the storage Secret itself."""

from __future__ import annotations

import argparse
import json

from storage_core.cli.common import (
    add_remote_args,
    add_result_file_arg,
    emit_json,
    open_store,
    write_result_file,
)
from storage_core.cli.subcommand import Subcommand

PROBE = ".tierkeeper-check"
"""The object written and deleted at the tier's root: beside the topic directories, never one of them."""


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_result_file_arg(p)
    add_remote_args(p)


def _result(args: argparse.Namespace, reachable: bool, message: str) -> None:
    if args.result_file:
        write_result_file(args.result_file, json.dumps({"reachable": reachable, "message": message[:1000]}))


def run(args: argparse.Namespace) -> int:
    from storage_core.adapters.store import redacted_url
    from storage_core.errors import TierkeeperError

    try:
        store = open_store(args, existing=True)
        key = f"{store.root.rstrip('/')}/{PROBE}"
        store.put_atomic(key, b"written by tierkeeper check-remote; safe to delete\n")
        store.delete([key])
    except TierkeeperError as exc:
        _result(args, False, str(exc))
        raise
    message = f"{redacted_url(args.remote)}: bucket reachable, {PROBE} written and deleted"
    _result(args, True, message)
    if args.json:
        emit_json({"reachable": True, "message": message})
    else:
        print(message)
    return 0


COMMAND = Subcommand(
    "check-remote",
    help="check that the remote tier is reachable: bucket there, an object written and deleted",
    description="Check the remote tier with this process's credentials: the bucket (or root directory) "
    f"exists, and an object {PROBE} can be written at its root and deleted again.",
    add_args=add_args,
    run=run,
)
