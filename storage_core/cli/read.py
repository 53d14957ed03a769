"""``tierkeeper read``: stream records of one partition from the remote tier."""

from __future__ import annotations

import argparse
import base64
import json
import sys

from storage_core.cli.common import add_remote_args, open_store
from storage_core.cli.subcommand import Subcommand


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", required=True, type=int)
    p.add_argument("--topic-id", help="which incarnation, when a topic name was deleted and recreated")
    start = p.add_mutually_exclusive_group(required=True)
    start.add_argument("--from-offset", type=int, metavar="N")
    start.add_argument(
        "--from-timestamp",
        type=int,
        metavar="MS",
        help="start at the first record with timestamp >= MS (as ListOffsets)",
    )
    p.add_argument("--max-records", type=int, metavar="N")
    p.add_argument(
        "--format",
        choices=["jsonl", "arrow", "parquet"],
        default="jsonl",
        help="jsonl: one JSON object per record; arrow (IPC stream) / parquet: the columns of Spark's Kafka "
        "source with headers, decoded without a Python object per record",
    )
    p.add_argument("--output", metavar="PATH", help="file to write (required for parquet; default: stdout)")
    p.add_argument("--isolation", choices=["read_committed", "read_uncommitted"], default="read_committed")
    p.add_argument("--cache-dir", help="local cache of remote indexes (default: none)")
    add_remote_args(p)


def _text(data: bytes | None) -> dict[str, str] | None:
    """Bytes as JSON: utf-8 text when it decodes, base64 otherwise (so nothing is lost)."""
    if data is None:
        return None
    try:
        return {"utf8": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from storage_core.remote.reader import Isolation, ReadOptions, RemoteReader

    options = ReadOptions(
        isolation=Isolation(args.isolation), cache_dir=Path(args.cache_dir) if args.cache_dir else None
    )
    if args.format != "jsonl":
        from storage_core.cli.read_arrow import write_columnar

        with RemoteReader(open_store(args, existing=True), options) as reader:
            return write_columnar(reader, args)
    count = 0
    out = sys.stdout
    with RemoteReader(open_store(args, existing=True), options) as reader:
        tp = reader.resolve(args.topic, args.partition, args.topic_id)
        records = (
            reader.read_from_offset(tp, args.from_offset)
            if args.from_offset is not None
            else reader.read_from_timestamp(tp, args.from_timestamp)
        )
        for record in records:
            if args.max_records is not None and count >= args.max_records:
                break
            out.write(
                json.dumps(
                    {
                        "offset": record.offset,
                        "timestamp": record.timestamp,
                        "timestamp_type": record.timestamp_type.name,
                        "key": _text(record.key),
                        "value": _text(record.value),
                        "leader_epoch": record.leader_epoch,
                        "headers": [[k, _text(v)] for k, v in record.headers],
                    }
                )
                + "\n"
            )
            count += 1
    out.flush()
    return 0


COMMAND = Subcommand(
    "read",
    help="read records of a partition from the remote tier",
    add_args=add_args,
    run=run,
)
