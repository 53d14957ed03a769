"""The machine-readable result a copy or cleanup Job leaves as its container's termination message.

Kubernetes keeps at most 4096 bytes of a termination message, so the result is compact: per topic, one
row per partition with the numbers the status needs, and per-partition errors cut to a line. When even
that does not fit, the per-partition rows are dropped and only the totals and failures stay (the status
then keeps its previous per-partition figures until a smaller run reports them). A cleanup's trim-hold
summary (:mod:`storage_core.reconcile.hold_results`) goes last: its lists are shortened before anything
of it is dropped, and its counts always stay. Written by the CLI
(``--result-file``), read by the operator; one definition for both sides.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from storage_core.reconcile.hold_results import HOLD_CUTS, cut_hold, decode_holds, encode_holds
from storage_core.reconcile.text import one_line
from storage_core.reconcile.trim_holds import SUMMARIES

LIMIT = 4096
VERSION = 1
MAX_ERROR = 160
# The columns of a partition row, in order.
COLUMNS = (
    "partition",
    "remote_start_offset",
    "remote_end_offset",
    "remote_segments",
    "remote_bytes",
    "untiered_segments",
    "untiered_bytes",
    "copied_segments",
    "copied_bytes",
)


def _cut(text: str) -> str:
    return one_line(text, MAX_ERROR)


def read_result(text: str | None, kind: str) -> dict[str, Any]:
    """The document a run of ``kind`` left (copy, cleanup, rebuild), its version and kind checked.
    ValueError when there is none or it is something else (a killed run leaves none, or a truncated one)."""
    document = json.loads(text or "")
    if not isinstance(document, dict) or document.get("v") != VERSION or document.get("kind") != kind:
        raise ValueError(f"not a Tierkeeper {kind} result")
    return document


def encode_copy(partitions: Sequence[Mapping[str, Any]], failure: str | None = None) -> str:
    """``partitions``: the copy summary's per-partition dictionaries (PartitionCopyResult fields)."""
    topics: dict[str, dict[str, Any]] = {}
    for p in partitions:
        entry = topics.setdefault(str(p["topic"]), {"id": p.get("topic_id"), "rows": [], "errors": {}})
        if p.get("error"):
            entry["errors"][str(p["partition"])] = _cut(p["error"])
        else:
            entry["rows"].append([p.get(column) for column in COLUMNS])
    document: dict[str, Any] = {"v": VERSION, "kind": "copy", "topics": topics}
    if failure:
        document["failure"] = _cut(failure)
    text = json.dumps(document, separators=(",", ":"))
    if len(text) <= LIMIT:
        return text
    for entry in topics.values():
        entry["copied"] = sum(int(r[COLUMNS.index("copied_segments")] or 0) for r in entry["rows"])
        entry["rows"] = []
    document["truncated"] = True
    text = json.dumps(document, separators=(",", ":"))
    while len(text) > LIMIT:  # too many failures to list: keep the first of each topic
        for entry in topics.values():
            errors = entry["errors"]
            if len(errors) > 1:
                first = next(iter(errors))
                entry["errors"] = {first: errors[first] + f" (and {len(errors) - 1} more)"}
        text = json.dumps(document, separators=(",", ":"))[:LIMIT]
    return text


def decode_copy(text: str) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """Topic -> partition dictionaries as ``encode_copy`` got them, and the run's failure if any.

    An unreadable message is a failure of the run (a crashed Job leaves none, or a truncated one)."""
    try:
        document = read_result(text, "copy")
    except ValueError as exc:
        return {}, f"the Job left no readable result ({_cut(str(exc))})"
    out: dict[str, list[dict[str, Any]]] = {}
    for topic, entry in document.get("topics", {}).items():
        rows = [
            {"topic": topic, "topic_id": entry.get("id"), **dict(zip(COLUMNS, row))} for row in entry["rows"]
        ]
        rows += [
            {"topic": topic, "topic_id": entry.get("id"), "partition": int(p), "error": error}
            for p, error in entry.get("errors", {}).items()
        ]
        out[topic] = rows
    return out, document.get("failure")


def encode_cleanup(report: Mapping[str, Any]) -> str:
    """A cleanup report (``run_cleanup``'s dictionary), reduced to what the status needs: per partition
    the remote figures, per topic incarnation the trim hold's summary (``trim_holds.summarize``, made
    here from the whole report, so the status is the one an in-process run folds)."""
    rows = [
        [
            p["topic"],
            p.get("topic_id"),
            p["partition"],
            p.get("remote_start_offset"),
            len(p.get("deleted", [])),
            int(p.get("bytes_deleted", 0)),
            1 if p.get("local_trim") else 0,
        ]
        for p in report.get("partitions", [])
    ]
    document: dict[str, Any] = {
        "v": VERSION,
        "kind": "cleanup",
        "rows": rows,
        "errors": [_cut(e) for e in report.get("errors", [])][:10],
        "bytes_deleted": int(report.get("bytes_deleted", 0)),
    }
    holds = encode_holds(report.get("partitions", []))
    if holds:
        document["holds"] = holds
    text = json.dumps(document, separators=(",", ":"))
    if len(text) > LIMIT:
        document["rows"], document["truncated"] = [], True
        text = json.dumps(document, separators=(",", ":"))
    for level in HOLD_CUTS:
        if len(text) <= LIMIT or not holds:
            break
        document["holds"] = {key: cut_hold(entry, level) for key, entry in holds.items()}
        text = json.dumps(document, separators=(",", ":"))
    return text


def decode_cleanup(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """A report in ``run_cleanup``'s shape for ``topic_after_cleanup``, or why there is none."""
    try:
        document = read_result(text, "cleanup")
    except ValueError as exc:
        return None, f"the Job left no readable result ({_cut(str(exc))})"
    partitions = [
        {
            "topic": row[0],
            "topic_id": row[1],
            "partition": row[2],
            "remote_start_offset": row[3],
            "deleted": [{}] * int(row[4]),
            "bytes_deleted": row[5],
            "local_trim": bool(row[6]),
        }
        for row in document.get("rows", [])
    ]
    report: dict[str, Any] = {
        "partitions": partitions,
        "errors": list(document.get("errors", [])),
        "bytes_deleted": document.get("bytes_deleted", 0),
    }
    try:
        report[SUMMARIES] = decode_holds(document.get("holds", {}))
    except ValueError as exc:  # the status keeps the hold it knew (an error keeps it), and says why
        report["errors"].append(str(exc))
    return report, None


def encode_table(kind: str, report: Mapping[str, Any] | None, failure: str | None = None) -> str:
    """The result of an export (``kind`` "export") or table maintenance ("maintain") run: its summary,
    or its failure. Next offsets of very many partitions are dropped to fit (the status keeps the last)."""
    document: dict[str, Any] = {"v": VERSION, "kind": kind}
    if failure is not None or report is None:
        document["failure"] = _cut(failure or "no result")
        return json.dumps(document, separators=(",", ":"))
    document["report"] = {k: v for k, v in report.items() if v is not None}
    text = json.dumps(document, separators=(",", ":"), default=str)
    if len(text) > LIMIT:
        document["report"].pop("next_offsets", None)
        document["truncated"] = True
        text = json.dumps(document, separators=(",", ":"), default=str)
    return text


def decode_table(kind: str, text: str) -> tuple[dict[str, Any] | None, str | None]:
    """``encode_table``'s report, or why there is none (an unreadable result is a failed run)."""
    try:
        document = json.loads(text)
        if not isinstance(document, dict) or document.get("v") != VERSION or document.get("kind") != kind:
            raise ValueError(f"not a Tierkeeper {kind} result")
    except ValueError as exc:
        return None, f"the Job left no readable result ({_cut(str(exc))})"
    if document.get("failure"):
        return None, str(document["failure"])
    report = document.get("report")
    return (report if isinstance(report, dict) else None), None
