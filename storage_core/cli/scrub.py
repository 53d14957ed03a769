"""``tierkeeper scrub``: re-verify every finished segment's objects (sizes, checksums) as a Spark job;
optionally quarantine the damaged segments, and release a quarantined one (the undo)."""

from __future__ import annotations

import argparse
import dataclasses

from storage_core.cli.common import add_remote_args, emit_json, open_store
from storage_core.cli.spark_args import add_spark_args, spark_from_args
from storage_core.cli.subcommand import Subcommand
from storage_core.errors import ConfigError

DAMAGE_EXIT = 3
"""Exit status when damage was found (1 stays "the command failed")."""


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", help="only this topic")
    p.add_argument(
        "--quarantine",
        action="store_true",
        help="take damaged segments out of the serving path (a QUARANTINED marker; nothing is deleted)",
    )
    p.add_argument(
        "--release",
        metavar="SEGMENT_ID",
        help="serve a quarantined segment again (needs --topic); no scrub runs",
    )
    p.add_argument("--json", action="store_true", help="machine-readable report")
    add_remote_args(p)
    add_spark_args(p)


def _release(args: argparse.Namespace) -> int:
    from storage_core.remote.catalog import PartitionCatalog, list_partitions, list_topics
    from storage_core.remote.layout import RemoteLayout, SegmentState
    from storage_core.retention.quarantine import release

    if not args.topic:
        raise ConfigError("--release needs --topic (the topic of the quarantined segment)")
    store = open_store(args)
    layout = RemoteLayout(store.root)
    for name, topic_id in list_topics(store, layout):
        if name != args.topic:
            continue
        for tp in list_partitions(store, layout, name, topic_id):
            listing = PartitionCatalog(store, layout, tp).listing()
            if any(
                str(e.segment_id) == args.release and SegmentState.QUARANTINED in e.states
                for e in listing.segments.values()
            ):
                meta = release(store, tp, args.release)
                if args.json:
                    emit_json({"released": args.release, "topic": tp.topic, "partition": tp.partition})
                else:
                    print(
                        f"released segment {args.release} of {tp} (offsets {meta.base_offset}.."
                        f"{meta.end_offset}); it was quarantined for: {meta.problem}"
                    )
                return 0
    raise ConfigError(f"no quarantined segment {args.release} in topic {args.topic}")


def run(args: argparse.Namespace) -> int:
    if args.release:
        return _release(args)
    from storage_core.jobs.scrub import run_scrub
    from storage_core.spark.options import StorageSpec

    store = open_store(args, existing=True)
    storage = StorageSpec(store.url, store.storage_options)
    with spark_from_args(args, "tierkeeper-scrub") as spark:
        results = run_scrub(spark, storage, args.topic, quarantine_damage=args.quarantine)
    damage = [d for r in results for d in r.damage]
    quarantined = sorted({(r.topic, r.partition, s) for r in results for s in r.quarantined})
    if args.json:
        emit_json(
            {
                "partitions": [dataclasses.asdict(r) for r in results],
                "damaged_objects": len(damage),
                "bytes_read": sum(r.bytes_read for r in results),
                "quarantined_segments": len(quarantined),
            }
        )
    else:
        for d in damage:
            print(f"{d.topic}-{d.partition} segment {d.base_offset} ({d.segment_id}): {d.key}: {d.problem}")
        for topic, partition, segment_id in quarantined:
            print(f"{topic}-{partition} segment {segment_id} is in quarantine (not served)")
        objects = sum(r.objects for r in results)
        print(
            f"scrubbed {objects} objects of {len(results)} partitions: {len(damage)} damaged, "
            f"{len(quarantined)} segments in quarantine"
        )
        if damage and not args.quarantine:
            print("rerun with --quarantine to stop serving the damaged segments (nothing is deleted)")
    return DAMAGE_EXIT if damage else 0


COMMAND = Subcommand(
    "scrub",
    help="re-verify remote segments against their recorded sizes/checksums",
    add_args=add_args,
    run=run,
)
