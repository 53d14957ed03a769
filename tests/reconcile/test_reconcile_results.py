"""The compact Job results: round trips, stays within a termination message, and a missing or foreign
message is a failure of the run, never a success."""

from __future__ import annotations

from typing import Any

from storage_core.reconcile.results import LIMIT, decode_cleanup, decode_copy, encode_cleanup, encode_copy


def row(partition: int, error: str | None = None) -> dict[str, Any]:
    return {
        "topic": "orders",
        "topic_id": "id",
        "partition": partition,
        "remote_start_offset": 0,
        "remote_end_offset": 99,
        "remote_segments": 2,
        "remote_bytes": 2048,
        "untiered_segments": 1,
        "untiered_bytes": 10,
        "copied_segments": 1,
        "copied_bytes": 1024,
        "error": error,
    }


def test_copy_round_trip() -> None:
    text = encode_copy([row(0), row(1, "orders-1: boom")])
    decoded, failure = decode_copy(text)
    assert failure is None
    got = {r["partition"]: r for r in decoded["orders"]}
    assert got[0]["remote_end_offset"] == 99 and got[0]["untiered_bytes"] == 10
    assert got[1]["error"] == "orders-1: boom"


def test_copy_result_fits_a_termination_message() -> None:
    text = encode_copy([row(p) for p in range(2000)] + [row(5000 + p, "x" * 500) for p in range(50)])
    assert len(text) <= LIMIT
    decoded, failure = decode_copy(text)
    assert failure is None and any("error" in r for r in decoded["orders"])


def test_missing_or_foreign_result_is_a_failure() -> None:
    assert decode_copy("")[1] is not None
    assert decode_copy('{"v": 1, "kind": "cleanup"}')[1] is not None
    assert decode_cleanup("Traceback (most recent call last)")[1] is not None


def test_cleanup_round_trip() -> None:
    report = {
        "partitions": [
            {
                "topic": "orders",
                "topic_id": "id",
                "partition": 0,
                "remote_start_offset": 50,
                "deleted": [{}, {}],
                "bytes_deleted": 300,
                "local_trim": {"from": 0, "to": 40},
            }
        ],
        "errors": [],
        "bytes_deleted": 300,
    }
    decoded, failure = decode_cleanup(encode_cleanup(report))
    assert failure is None and decoded is not None
    (part,) = decoded["partitions"]
    assert part["remote_start_offset"] == 50 and len(part["deleted"]) == 2 and part["local_trim"]
