"""``tierkeeper ls``: what the remote tier holds, per partition and segment."""

from __future__ import annotations

import argparse
from typing import Any

from storage_core.cli.common import add_remote_args, emit_json, open_store
from storage_core.cli.subcommand import Subcommand


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", help="only this topic")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_remote_args(p)


def run(args: argparse.Namespace) -> int:
    from storage_core.remote.catalog import PartitionCatalog, list_partitions, list_topics
    from storage_core.remote.layout import RemoteLayout

    store = open_store(args, existing=True)
    layout = RemoteLayout(store.root)
    rows: list[dict[str, Any]] = []
    divergences: list[str] = []
    for topic, topic_id in list_topics(store, layout):
        if args.topic and topic != args.topic:
            continue
        for tp in list_partitions(store, layout, topic, topic_id):
            catalog = PartitionCatalog(store, layout, tp)
            listing = catalog.listing()
            manifest = catalog.rebuild_manifest(listing, write=False, strict=True)
            cover = manifest.cover()
            finished = {m.segment_id: m for m in manifest.finished()}
            served = {r.segment.segment_id: r for r in cover.ranges}
            divergent = cover.divergent_segments()
            divergences.extend(f"{tp}: {d.describe()}" for d in cover.divergences)
            for entry in sorted(listing.segments.values(), key=lambda e: (e.base_offset, str(e.segment_id))):
                meta = finished.get(entry.segment_id)
                serves = served.get(entry.segment_id)
                rows.append(
                    {
                        "topic": topic,
                        "topic_id": topic_id,
                        "partition": tp.partition,
                        "base_offset": entry.base_offset,
                        "end_offset": meta.end_offset if meta else None,
                        "segment_id": str(entry.segment_id),
                        "state": entry.state.value if entry.state else "NO_METADATA",
                        "bytes": sum(entry.objects.values()),
                        "max_timestamp": meta.max_timestamp if meta else None,
                        "serves_from": serves.first_offset if serves else None,
                        "serves_to": serves.last_offset if serves else None,
                        "divergent": entry.segment_id in divergent,
                    }
                )
    if args.json:
        emit_json({"segments": rows, "divergent": divergences})
        return 0
    head = f"{'TOPIC':<24} {'PART':>4} {'BASE':>12} {'END':>12} {'STATE':<16} {'BYTES':>12} {'SERVES':<25}"
    print(f"{head}  SEGMENT ID")
    for r in rows:
        end = "-" if r["end_offset"] is None else r["end_offset"]
        print(
            f"{r['topic']:<24} {r['partition']:>4} {r['base_offset']:>12} {end:>12} {r['state']:<16} "
            f"{r['bytes']:>12} {_serves(r):<25}  {r['segment_id']}"
        )
    for line in divergences:
        print(f"divergent copies: {line}")
    return 0


COMMAND = Subcommand(
    "ls",
    help="list remote segments: offsets, states, bytes",
    add_args=add_args,
    run=run,
)


def _serves(row: dict[str, Any]) -> str:
    """The offsets a segment serves once overlaps are resolved (storage_core/remote/cover.py)."""
    if row["state"] != "COPY_FINISHED":
        return "-"
    if row["serves_from"] is None:
        return "none (overlapped)"
    return f"{row['serves_from']}..{row['serves_to']}" + (" DIVERGENT" if row["divergent"] else "")
