"""Where a ``continueFromKafka`` read starts and ends, over the tier and the brokers together.

``earliest`` is the lower of the tier's first offset and the brokers' log start, ``latest`` the higher of
the two ends (``hybrid_bounds``); a starting or ending timestamp is looked up in the tier's time indexes
when a tiered record is that late, else asked of the brokers (``offsets_at``); offsets neither side holds
are data loss (``report_lost``, ``failOnDataLoss``). Shared by the batch reader and the stream reader;
how a planned range is then cut between the two sides is ``hybrid.pieces``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from storage_core.errors import ConfigError, DataLossError
from storage_core.remote.layout import TopicPartitionId
from storage_core.remote.metadata import Manifest
from storage_core.remote.reader import RemoteReader
from storage_core.spark.hybrid import Brokers
from storage_core.spark.options import EARLIEST, LATEST, ScanOptions
from storage_core.spark.windows import tier_offset_at, timestamp_for

_log = logging.getLogger(__name__)


def hybrid_bounds(
    manifest: Manifest | None, low: int | None, high: int | None
) -> tuple[int | None, int | None]:
    """(earliest, latest) of a partition read from both sides: the lower first offset, the higher end."""
    tier_first = manifest.start_offset if manifest is not None else None
    tier_end = manifest.end_offset + 1 if manifest is not None and manifest.end_offset is not None else None
    firsts = [v for v in (tier_first, low) if v is not None]
    ends = [v for v in (tier_end, high) if v is not None]
    return (min(firsts) if firsts else None), (max(ends) if ends else None)


def resolve_spec(spec: Any, key: tuple[str, int], default: int, first: int, after_last: int) -> int:
    value = (EARLIEST if spec == "earliest" else LATEST) if isinstance(spec, str) else None
    if value is None:
        value = spec.get(key, default)
    if value == EARLIEST:
        return first
    if value == LATEST:
        return after_last
    return int(value)


TimeAnswers = dict[tuple[str, int], tuple[int, int | None]]
"""Per partition, (the timestamp asked, the first offset with a record that late or None)."""


def times_asked(
    opts: ScanOptions, keys: Iterable[tuple[str, int]], *, start: bool
) -> dict[tuple[str, int], int]:
    """The timestamps the options ask the starts (or the ends) of ``keys`` at; empty when they ask
    offsets. ``startingTimestamp`` wins over ``startingOffsetsByTimestamp``, which wins over
    ``startingOffsets``, as in Spark's Kafka source (the same for the ends)."""
    if start:
        every, each, name = opts.starting_timestamp, opts.starting_by_timestamp, "startingOffsetsByTimestamp"
    else:
        every, each, name = opts.ending_timestamp, opts.ending_by_timestamp, "endingOffsetsByTimestamp"
    asked = {key: timestamp_for(key, every, each, name) for key in keys}
    return {key: ts for key, ts in asked.items() if ts is not None}


def offsets_at(
    reader: RemoteReader,
    brokers: Brokers,
    tiered: Mapping[tuple[str, int], TopicPartitionId],
    on_brokers: set[tuple[str, int]],
    asked: Mapping[tuple[str, int], int],
) -> TimeAnswers:
    """continueFromKafka: the first offset at each asked timestamp, from the tier's time indexes when a
    tiered record is that late (the brokers may no longer hold it), else from the brokers (Kafka's
    offsetsForTimes over the tail); None when neither side has a record that late."""
    out: TimeAnswers = {}
    ask_brokers: dict[tuple[str, int], int] = {}
    for key, ts in asked.items():
        tp = tiered.get(key)
        found = tier_offset_at(reader, tp, ts) if tp is not None else None
        if found is not None:
            out[key] = (ts, found)
        elif key in on_brokers:
            ask_brokers[key] = ts
        else:
            out[key] = (ts, None)
    if ask_brokers:
        for key, offset in brokers.offsets_at(ask_brokers).items():
            out[key] = (ask_brokers[key], offset)
    return out


def hybrid_start(
    opts: ScanOptions,
    key: tuple[str, int],
    first: int,
    after_last: int,
    at_times: TimeAnswers | None = None,
) -> int:
    if at_times is not None and key in at_times:
        timestamp, found = at_times[key]
        if found is not None:
            return min(max(found, first), after_last)
        if opts.no_match_starts_at_latest:
            return after_last
        raise ConfigError(
            f"{key[0]}-{key[1]}: no record in the remote tier or on the brokers has a timestamp >= "
            f"{timestamp}; set startingOffsetsByTimestampStrategy=latest to start at the latest offset"
        )
    start = resolve_spec(opts.starting, key, EARLIEST, first, after_last)
    if start < first:
        report_lost(opts, key, start, first, "below the remote tier's and the brokers' first offsets")
        start = first
    return min(start, after_last)


def report_lost(opts: ScanOptions, key: tuple[str, int], lo: int, hi: int, why: str) -> None:
    what = (
        f"{key[0]}-{key[1]}: offsets {lo}..{hi - 1} are neither in the remote tier nor on the brokers ({why})"
    )
    if opts.fail_on_data_loss:
        raise DataLossError(
            f"{what}; some data may have been lost. Set failOnDataLoss=false to skip them with a warning"
        )
    _log.warning("%s: skipped (failOnDataLoss=false)", what)
