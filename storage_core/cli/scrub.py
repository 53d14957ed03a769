"""``tierkeeper scrub``: re-verify every finished segment's objects (sizes, checksums) as a Spark job."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from storage_core.cli.common import add_remote_args, emit_json, open_store
from storage_core.cli.export import add_spark_args

DAMAGE_EXIT = 3
"""Exit status when damage was found (1 stays "the command failed")."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "scrub", help="re-verify remote segments against their recorded sizes/checksums"
    )
    p.add_argument("--topic", help="only this topic")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    add_remote_args(p)
    add_spark_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from storage_core.jobs.scrub import run_scrub
    from storage_core.jobs.spark_session import parse_conf, spark_session
    from storage_core.spark.options import StorageSpec

    store = open_store(args, existing=True)
    storage = StorageSpec(store.url, store.storage_options)
    spark = spark_session("tierkeeper-scrub", args.spark_master, parse_conf(args.spark_conf))
    try:
        results = run_scrub(spark, storage, args.topic)
    finally:
        spark.stop()
    damage = [d for r in results for d in r.damage]
    if args.json:
        emit_json(
            {
                "partitions": [dataclasses.asdict(r) for r in results],
                "damaged_objects": len(damage),
                "bytes_read": sum(r.bytes_read for r in results),
            }
        )
    else:
        for d in damage:
            print(f"{d.topic}-{d.partition} segment {d.base_offset} ({d.segment_id}): {d.key}: {d.problem}")
        objects = sum(r.objects for r in results)
        print(f"scrubbed {objects} objects of {len(results)} partitions: {len(damage)} damaged")
    return DAMAGE_EXIT if damage else 0
