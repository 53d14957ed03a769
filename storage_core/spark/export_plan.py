"""The Parquet export's layout and bookkeeping: file names, the state kept in the target, and which
files a killed run left behind.

Target layout (hive-style, so Spark and pyarrow read ``partition`` and ``date`` back as columns)::

    <to>/partition=<p>/date=<YYYY-MM-DD>/part-<first offset, 20 digits>-<end offset, 20 digits>.parquet
    <to>/_tierkeeper/export-state.json      {"topic", "topic_id", "next_offsets": {"<p>": offset}}

A file holds the records of one scan split (scan_plan.py) with that UTC date, and is named by the
split's offset window ``[first, end)``, so the same split always writes the same names. The state says,
per partition, up to which offset the export is committed; it is rewritten (atomically) only after every
file below that offset is stored. A run first deletes every file of a partition that starts at or past
its committed offset (what a killed run left), then exports from there: killed anywhere, the next run
leaves each record exactly once. ``date`` is the record timestamp's UTC date.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

STATE_DIR = "_tierkeeper"
STATE_NAME = "export-state.json"
_FILE = re.compile(r"^part-(?P<first>\d{20})-(?P<end>\d{20})\.parquet$")


class ExportState(BaseModel):
    """What is committed in a target: per partition, every record below ``next_offsets[p]``."""

    topic: str
    topic_id: str
    next_offsets: dict[int, int] = Field(default_factory=dict)


def file_name(first: int, end: int) -> str:
    return f"part-{first:020d}-{end:020d}.parquet"


def data_key(root: str, partition: int, date: str, first: int, end: int) -> str:
    return f"{root.rstrip('/')}/partition={partition}/date={date}/{file_name(first, end)}"


def state_key(root: str) -> str:
    return f"{root.rstrip('/')}/{STATE_DIR}/{STATE_NAME}"


def partition_of_dir(name: str) -> int | None:
    """``.../partition=3`` -> 3; None for anything else."""
    last = name.rstrip("/").rsplit("/", 1)[-1]
    if not last.startswith("partition="):
        return None
    try:
        return int(last[len("partition=") :])
    except ValueError:
        return None


def uncommitted(name: str, committed: int) -> bool:
    """Whether a file in a partition's directory is left over from an unfinished run: an export file
    starting at or past the committed offset, or a temporary file of an interrupted write."""
    last = name.rsplit("/", 1)[-1]
    if last.startswith(".tmp-"):
        return True
    match = _FILE.match(last)
    return match is not None and int(match["first"]) >= committed
