"""``spark.read.format("tierkeeper")``: the remote tier as a DataFrame with the Kafka source's schema.

The planner (driver side) reads manifests and, where needed, remote log indexes, and hands Spark one
input partition per split (scan_plan.py: one per segment, large segments cut by byte range). Each task
opens its own store from the picklable :class:`~storage_core.spark.options.StorageSpec`, reads its
byte range and yields Arrow batches (formats/arrow_records.py), so no row passes through Python
objects. Spark creates the SparkSession; nothing here does.

Filter pushdown (Spark >= 4.1, ``spark.sql.python.filterPushdown.enabled=true``) works with the one
:class:`TierkeeperDataSource`, the automatically registered one included, and reads still work with
the setting off (see :class:`_PruneWithFilters` for how and why). Pushed filters on ``partition``, ``offset``
and ``timestamp`` prune partitions, segments and index entries; Spark still evaluates every filter on
the rows, so pruning only has to be safe.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from storage_core.adapters.kafka_tail import read_range
from storage_core.errors import ConfigError, DataLossError
from storage_core.remote.layout import TopicPartitionId
from storage_core.remote.metadata import Manifest
from storage_core.remote.reader import Isolation, ReadOptions, RemoteReader
from storage_core.remote.scan_plan import (
    PartitionWindow,
    ScanSplit,
    pack_splits,
    plan_partition,
    read_split,
)
from storage_core.spark.admission import Pending, admit
from storage_core.spark.hybrid import (
    KAFKA,
    TIER,
    Brokers,
    held,
    pieces,
    tiered_partitions,
)
from storage_core.spark.hybrid import (
    LOST as LOST_PIECE,
)
from storage_core.spark.options import EARLIEST, LATEST, ScanOptions, parse_include_headers, parse_options
from storage_core.spark.windows import (
    Pruning,
    partition_window,
    plan_batch,
    tier_offset_at,
    timestamp_for,
    topic_partitions,
)

SHORT_NAME = "tierkeeper"
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
    "timestampType int"
)
HEADERS_COLUMN = ", headers array<struct<key: string, value: binary>>"

_log = logging.getLogger(__name__)


class SplitPartition(InputPartition):  # type: ignore[misc]
    """One task: consecutive splits of one partition, read in order, plus what the task needs to open
    the store. Its repr names the splits' offsets only.

    A batch read plans one split per task (its splits spread over the cores). A micro-batch packs a
    partition's splits into as few tasks as ``maxBytesPerSplit`` allows, as the Kafka source reads a
    partition's range of a batch in one task: each task of a Python source costs Spark a launch and a
    Python worker round trip, more than reading a 16 MiB segment (docs/benchmarks.md, issue 31)."""

    def __init__(self, splits: Sequence[ScanSplit]) -> None:
        super().__init__(tuple(splits))
        self.splits = tuple(splits)

    def __repr__(self) -> str:
        first, last = self.splits[0], self.splits[-1]
        many = f" in {len(self.splits)} splits" if len(self.splits) > 1 else ""
        offsets = f"offsets [{first.start_offset}, {last.end_offset})"
        return f"SplitPartition({first.topic}-{first.partition} {offsets}{many})"


def _runs(splits: list[ScanSplit], max_bytes: int) -> list[InputPartition]:
    return [SplitPartition(run) for run in pack_splits(splits, max_bytes)]


class KafkaRangePartition(InputPartition):  # type: ignore[misc]
    """One task of a hybrid read: offsets [start, end) of a partition, read from the brokers."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"KafkaRangePartition({self.topic}-{self.partition} offsets [{self.start}, {self.end}))"


def _open_reader(opts: ScanOptions) -> RemoteReader:
    return RemoteReader(opts.storage.open(), ReadOptions(isolation=opts.isolation))


def _read(opts: ScanOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, KafkaRangePartition):
        assert opts.kafka is not None
        yield from read_range(
            opts.kafka,
            partition.topic,
            partition.partition,
            partition.start,
            partition.end,
            read_committed=opts.isolation is Isolation.READ_COMMITTED,
            include_headers=opts.include_headers,
        )
        return
    assert isinstance(partition, SplitPartition)
    with _open_reader(opts) as reader:
        for split in partition.splits:
            yield from read_split(reader, split, include_headers=opts.include_headers)


def _kafka_ranges(key: tuple[str, int], start: int, end: int, step: int | None) -> list[InputPartition]:
    step = step or max(1, end - start)
    return [KafkaRangePartition(key[0], key[1], lo, min(lo + step, end)) for lo in range(start, end, step)]


class _PruneWithFilters:
    """The batch reader's ``pushFilters``: notes what the filters allow leaving out, pushes none.

    Why an object and not a method: PySpark 4.1 refuses a reader that overrides ``pushFilters`` while
    ``spark.sql.python.filterPushdown.enabled`` is off (Spark's default), with
    DATA_SOURCE_PUSHDOWN_DISABLED, so that a source relying on pushdown does not silently lose it. Its
    whole test, in ``pyspark/sql/worker/plan_data_source_read.py``, is::

        getattr(reader.pushFilters, "__func__", None) is not DataSourceReader.pushFilters

    Losing ours is harmless: it only prunes, and it hands every filter back, so Spark evaluates all of
    them on the rows either way. So this object carries the base method as its ``__func__`` and the
    one class (the automatically registered one included) reads whether the session enables pushdown
    or not, and prunes when it does. Spark calls it only with pushdown on; with it off, Spark never
    calls ``pushFilters`` at all (``PythonScanBuilder.pushFilters`` returns first). Should a later
    PySpark check differently, reads with pushdown off fail loudly, never wrongly (the test
    ``test_a_new_session_finds_the_source_without_registering_it`` reads with it off)."""

    def __init__(self, reader: _BatchReader) -> None:
        self.__func__ = DataSourceReader.pushFilters
        self._reader = reader

    def __call__(self, filters: list[Any]) -> Iterator[Any]:
        self._reader.pruning = pruning_from_filters(filters)
        # Every filter goes back to Spark: pruning is by whole index entries, not rows.
        yield from filters


class _BatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: ScanOptions) -> None:
        self.opts = opts
        self.pruning = Pruning()

    @property
    def pushFilters(self) -> _PruneWithFilters:
        return _PruneWithFilters(self)

    def partitions(self) -> Sequence[InputPartition]:
        with _open_reader(self.opts) as reader:
            if self.opts.kafka is not None:
                return _plan_hybrid_batch(reader, self.opts, self.pruning)
            return [SplitPartition([s]) for s in plan_batch(reader, self.opts, self.pruning)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SplitPartition | KafkaRangePartition):
            # Nothing to read (partitions() planned no split): Spark still runs one task, without a split.
            return iter(())
        return _read(self.opts, partition)


def _plan_hybrid_batch(reader: RemoteReader, opts: ScanOptions, pruning: Pruning) -> list[InputPartition]:
    """A batch read with continueFromKafka: each partition's [start, end) from the tier where it holds
    it and from the brokers elsewhere (hybrid.py); ``latest`` is the brokers' end."""
    assert opts.kafka is not None
    brokers = Brokers(opts.kafka, opts.isolation)
    on_brokers = brokers.partitions(opts)
    tiered = tiered_partitions(reader, opts, brokers.topic_ids(on_brokers))
    keys = sorted(set(tiered) | on_brokers)
    if pruning.partitions is not None:
        keys = [k for k in keys if k[1] in pruning.partitions]
    lows = brokers.starts([k for k in keys if k in on_brokers])
    highs = brokers.ends([k for k in keys if k in on_brokers])
    starts_at = _offsets_at(reader, brokers, tiered, on_brokers, _times_asked(opts, keys, start=True))
    ends_at = _offsets_at(reader, brokers, tiered, on_brokers, _times_asked(opts, keys, start=False))
    out: list[InputPartition] = []
    for key in keys:
        tp = tiered.get(key)
        manifest = reader.manifest(tp, refresh=True) if tp is not None else None
        first, after_last = _hybrid_bounds(manifest, lows.get(key), highs.get(key))
        if first is None or after_last is None:
            continue
        start = _hybrid_start(opts, key, first, after_last, starts_at)
        if key in ends_at:
            found_end = ends_at[key][1]
            end = after_last if found_end is None else min(found_end, after_last)  # no match: latest
        else:
            end = min(_resolve_spec(opts.ending, key, LATEST, first, after_last), after_last)
        if pruning.min_offset is not None:
            start = max(start, pruning.min_offset)
        if pruning.end_offset is not None:
            end = min(end, pruning.end_offset)
        if start >= end:
            continue
        for piece in pieces(start, end, held(manifest), lows.get(key), highs.get(key)):
            if piece.source == TIER:
                assert tp is not None and manifest is not None
                window = PartitionWindow(tp, piece.start, piece.end, pruning.min_timestamp)
                out.extend(
                    SplitPartition([s])
                    for s in plan_partition(reader, manifest, window, max_split_bytes=opts.max_split_bytes)
                )
            elif piece.source == KAFKA:
                out.extend(_kafka_ranges(key, piece.start, piece.end, opts.max_records_per_partition))
            else:
                _lost(opts, key, piece.start, piece.end, "deleted by retention on both sides")
    return out


def _hybrid_bounds(
    manifest: Manifest | None, low: int | None, high: int | None
) -> tuple[int | None, int | None]:
    """(earliest, latest) of a partition read from both sides: the lower first offset, the higher end."""
    tier_first = manifest.start_offset if manifest is not None else None
    tier_end = manifest.end_offset + 1 if manifest is not None and manifest.end_offset is not None else None
    firsts = [v for v in (tier_first, low) if v is not None]
    ends = [v for v in (tier_end, high) if v is not None]
    return (min(firsts) if firsts else None), (max(ends) if ends else None)


def _resolve_spec(spec: Any, key: tuple[str, int], default: int, first: int, after_last: int) -> int:
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


def _times_asked(
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


def _offsets_at(
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


def _hybrid_start(
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
    start = _resolve_spec(opts.starting, key, EARLIEST, first, after_last)
    if start < first:
        _lost(opts, key, start, first, "below the remote tier's and the brokers' first offsets")
        start = first
    return min(start, after_last)


def _lost(opts: ScanOptions, key: tuple[str, int], lo: int, hi: int, why: str) -> None:
    what = (
        f"{key[0]}-{key[1]}: offsets {lo}..{hi - 1} are neither in the remote tier nor on the brokers ({why})"
    )
    if opts.fail_on_data_loss:
        raise DataLossError(
            f"{what}; some data may have been lost. Set failOnDataLoss=false to skip them with a warning"
        )
    _log.warning("%s: skipped (failOnDataLoss=false)", what)


def _millis(value: Any) -> int | None:
    if isinstance(value, datetime):
        # Spark hands timestamps as naive local-time datetimes (or aware ones): .timestamp() handles both.
        # Rounded down, so a bound in the middle of a millisecond still keeps that millisecond's records.
        return math.floor(value.timestamp() * 1000)
    return None


def _offset_value(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def pruning_from_filters(filters: Sequence[Any]) -> Pruning:
    """What the AND of pushed filters allows leaving out. A filter it cannot use prunes nothing: any other
    column, ``Not`` (Spark hands ``a <> 1`` as ``Not(EqualTo)``), null tests, string matches, values of
    an unexpected type. Nothing here may fail: Spark evaluates every filter on the rows anyway."""
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )

    partitions: set[int] | None = None
    lo: int | None = None
    hi: int | None = None
    ts_lo: int | None = None

    def tighten_lo(v: int) -> None:
        nonlocal lo
        lo = v if lo is None else max(lo, v)

    def tighten_hi(v: int) -> None:
        nonlocal hi
        hi = v if hi is None else min(hi, v)

    for f in filters:
        attribute = getattr(f, "attribute", None)
        column = attribute[0] if isinstance(attribute, tuple) and len(attribute) == 1 else None
        value = getattr(f, "value", None)
        equal = isinstance(f, EqualTo | EqualNullSafe)
        if column == "partition":
            wanted: set[int] | None = None
            if equal and (number := _offset_value(value)) is not None:
                wanted = {number}
            elif (
                isinstance(f, In)
                and isinstance(value, tuple | list)
                and all(_offset_value(v) is not None for v in value)
            ):
                wanted = set(value)
            if wanted is not None:
                partitions = wanted if partitions is None else partitions & wanted
        elif column == "offset" and (offset := _offset_value(value)) is not None:
            if equal:
                tighten_lo(offset)
                tighten_hi(offset + 1)
            elif isinstance(f, GreaterThan):
                tighten_lo(offset + 1)
            elif isinstance(f, GreaterThanOrEqual):
                tighten_lo(offset)
            elif isinstance(f, LessThan):
                tighten_hi(offset)
            elif isinstance(f, LessThanOrEqual):
                tighten_hi(offset + 1)
        elif column == "timestamp":
            ms = _millis(value)
            if ms is not None and (equal or isinstance(f, GreaterThan | GreaterThanOrEqual)):
                # Only a lower bound prunes: a segment's oldest record is not known, its newest is.
                ts_lo = ms if ts_lo is None else max(ts_lo, ms)
    return Pruning(frozenset(partitions) if partitions is not None else None, lo, hi, ts_lo)


Key = tuple[str, int]
"""(topic, partition): how the stream reader keys its offsets."""


def offsets_json(offsets: dict[Key, int]) -> dict[str, dict[str, int]]:
    """``{"topic": {"0": next offset}}``: Kafka's JSON, which Spark writes to the checkpoint."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


class _StreamReader(DataSourceStreamReader):  # type: ignore[misc]
    """Offsets are Kafka's JSON, ``{"topic": {"<partition>": next offset}}``; the latest is each
    partition's remote end + 1, so a newly tiered segment becomes the next micro-batch. Spark
    checkpoints the offsets, which is what makes a restart read every record exactly once.

    As in the Kafka source: the starting options decide the initial offset only; a partition (or, with
    subscribePattern, a topic) that appears later is read from its first tiered offset; every planned
    range is checked for offsets the remote tier no longer holds (``failOnDataLoss``); the latest offset
    never moves backwards (a quarantined last segment must not make Spark commit a lower offset and read
    it again); ``maxOffsetsPerTrigger`` / ``maxBytesPerTrigger`` bound what a batch reads. Manifests
    are refreshed at most once per ``manifestRefreshIntervalMs``: Spark asks for the latest offset every
    few milliseconds when idle, and each refresh lists every partition read."""

    def __init__(self, opts: ScanOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.opts = opts
        self._clock = clock
        self._manifests: dict[Key, tuple[TopicPartitionId, Manifest]] = {}
        self._refreshed_at: float | None = None
        self._high: dict[Key, int] = {}
        """Per partition, the highest offset handed to (or received from) Spark: latest never goes below."""
        self._read_to: dict[Key, int] = {}
        """Per partition, a batch's start that was above its end (after a restart, the tier's end having
        gone back): every offset below it was read before, so the next batches begin there at least."""
        self._based = False
        """Whether the next batch's start is known: the initial offsets were computed, or Spark named a
        start (a restart's checkpoint through partitions)."""
        self._brokers = Brokers(opts.kafka, opts.isolation) if opts.kafka is not None else None
        """continueFromKafka: the brokers' partitions and offsets (the tail past the tier's end)."""
        self._broker_keys: set[Key] = set()
        self._driver_reader: RemoteReader | None = None
        """The planner's reader, kept from call to call (Spark calls latestOffset and partitions of one
        reader object in one long-lived driver process): one store client, and the remote indexes of the
        segments a batch boundary cuts read once for the two batches that share them (the index cache
        is keyed by segment id, never stale)."""

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles a stream reader's ``read`` for its tasks: they open their own store and clients.
        return {**self.__dict__, "_driver_reader": None}

    def _reader(self) -> RemoteReader:
        if self._driver_reader is None:
            self._driver_reader = _open_reader(self.opts)
        return self._driver_reader

    def stop(self) -> None:
        if self._driver_reader is not None:
            self._driver_reader.close()
            self._driver_reader = None

    def _keys(self, offsets: dict[str, Any]) -> dict[Key, int]:
        """Spark's offsets (Kafka's JSON) keyed by (topic, partition). A flat ``{"0": n}`` is a checkpoint
        written before offsets named their topic: it is the one topic's, or refused."""
        if all(isinstance(v, dict) for v in offsets.values()):
            return {(t, int(p)): int(o) for t, per in offsets.items() for p, o in per.items()}
        if not self.opts.topic:
            raise ConfigError(
                "the checkpoint's offsets name no topic (written by an older tierkeeper for one topic): "
                "subscribe to that one topic, or start a new checkpoint"
            )
        return {(self.opts.topic, int(p)): int(o) for p, o in offsets.items()}

    def _refresh(
        self, reader: RemoteReader, *, force: bool = False
    ) -> dict[Key, tuple[TopicPartitionId, Manifest]]:
        now = self._clock()
        due = self._refreshed_at is None or (now - self._refreshed_at) * 1000 >= self.opts.refresh_interval_ms
        if force or due:
            if self._brokers is None:
                tps = topic_partitions(reader, self.opts)
            else:
                self._broker_keys = self._brokers.partitions(self.opts)
                live = self._brokers.topic_ids(self._broker_keys)
                tps = list(tiered_partitions(reader, self.opts, live).values())
            self._manifests = {
                (tp.topic, tp.partition): (tp, reader.manifest(tp, refresh=True)) for tp in tps
            }
            self._refreshed_at = now
        return self._manifests

    def _bounds(self, *, starts: bool = False) -> dict[Key, tuple[int, int]]:
        """continueFromKafka: per partition, (earliest, latest) over the tier and the brokers (whose ends
        are asked at every call, as the Kafka source does; the tier's at most once per interval). The
        brokers' log starts only with ``starts`` (else the earliest is the tier's, or the brokers' end)."""
        assert self._brokers is not None
        keys = sorted(set(self._manifests) | self._broker_keys)
        on_brokers = [k for k in keys if k in self._broker_keys]
        highs = self._brokers.ends(on_brokers)
        lows = self._brokers.starts(on_brokers) if starts else highs
        out: dict[Key, tuple[int, int]] = {}
        for key in keys:
            manifest = self._manifests[key][1] if key in self._manifests else None
            first, after_last = _hybrid_bounds(manifest, lows.get(key), highs.get(key))
            if first is not None and after_last is not None:
                out[key] = (first, after_last)
        return out

    def _raise_high(self, offsets: dict[Key, int]) -> None:
        for key, offset in offsets.items():
            self._high[key] = max(self._high.get(key, offset), offset)

    def _initial(self) -> dict[Key, int]:
        out: dict[Key, int] = {}
        if self._brokers is not None:
            reader = self._reader()
            self._refresh(reader, force=True)
            bounds = self._bounds(starts=True)
            tiered = {key: tp for key, (tp, _) in self._manifests.items()}
            asked = _times_asked(self.opts, bounds, start=True)
            at_times = _offsets_at(reader, self._brokers, tiered, self._broker_keys, asked)
            for key, (first, after_last) in bounds.items():
                out[key] = _hybrid_start(self.opts, key, first, after_last, at_times)
            self._raise_high(out)
            self._based = True
            return out
        reader = self._reader()
        for key, (tp, manifest) in self._refresh(reader, force=True).items():
            if manifest.start_offset is None or manifest.end_offset is None:
                continue
            window = partition_window(reader, self.opts, tp, manifest, Pruning())
            out[key] = window.start if window is not None else manifest.end_offset + 1
        self._raise_high(out)
        self._based = True
        return out

    def initialOffset(self) -> dict[str, dict[str, int]]:
        return offsets_json(self._initial())

    def latestOffset(self) -> dict[str, dict[str, int]]:
        limited = self.opts.max_offsets_per_trigger is not None or self.opts.max_bytes_per_trigger is not None
        if limited and not self._based:
            # A new query: Spark asks for the latest offset before the initial one, and the first batch
            # begins at the initial one. (A restart says where its checkpoint is first, through
            # setLatestSeenOffset -> partitions(X, X); without that, a base below the checkpoint only
            # gives one empty batch, see _plan.)
            self._initial()
        reader = self._reader()
        manifests = self._refresh(reader)
        if self._brokers is not None:
            ends = {k: after_last for k, (_, after_last) in self._bounds().items()}
            if limited:
                pending = {}
                for k, end in ends.items():
                    start = self._high.get(k, end)
                    known = manifests.get(k)
                    # The tier's segments have stored sizes; the brokers' offsets after them count none.
                    pending[k] = _pending(known[1], start, end) if known else Pending(start, max(start, end))
                ends = admit(pending, self.opts.max_offsets_per_trigger, self.opts.max_bytes_per_trigger)
            self._raise_high(ends)
            return offsets_json(self._high)
        ends = {k: m.end_offset + 1 for k, (_, m) in manifests.items() if m.end_offset is not None}
        if limited:
            pending = {
                k: _pending(manifests[k][1], self._high.get(k, manifests[k][1].start_offset or 0), end)
                for k, end in ends.items()
            }
            ends = admit(pending, self.opts.max_offsets_per_trigger, self.opts.max_bytes_per_trigger)
        self._raise_high(ends)
        return offsets_json(self._high)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin_at, end_at = self._keys(start), self._keys(end)
        self._based = True
        self._raise_high(end_at)
        self._raise_high(begin_at)
        out: list[InputPartition] = []
        reader = self._reader()
        if self._brokers is not None:
            return self._plan_hybrid(reader, begin_at, end_at)
        manifests = self._manifests
        if any(k not in manifests for k in end_at):
            manifests = self._refresh(reader, force=True)
        for key, stop in sorted(end_at.items()):
            planned = self._plan(reader, manifests.get(key), key, begin_at.get(key), stop)
            out.extend(_runs(planned, self.opts.max_split_bytes))
        return out

    def _plan(
        self,
        reader: RemoteReader,
        known: tuple[TopicPartitionId, Manifest] | None,
        key: Key,
        begin: int | None,
        stop: int,
    ) -> list[ScanSplit]:
        """The splits of [begin, stop) of partition ``key``; every offset of it the tier does not hold is
        data loss (failOnDataLoss). ``begin`` None: a partition that appeared after the query started."""
        if begin is not None:
            if stop < begin:
                # Only after a restart (latest never goes back in one reader): the tier's end went back
                # below the checkpoint. Spark starts the next batch at ``stop``; [stop, begin) was read.
                self._read_to[key] = max(begin, self._read_to.get(key, begin))
            begin = max(begin, self._read_to.get(key, begin))
        manifest = known[1] if known is not None else None
        first = manifest.start_offset if manifest is not None else None
        last = manifest.end_offset if manifest is not None else None
        if known is None or manifest is None or first is None or last is None:
            if begin is not None and begin < stop:
                self._data_loss(key, begin, stop, "the remote tier holds nothing of the partition now")
            return []
        tp, after_last = known[0], last + 1
        if begin is None:
            # As the Kafka source does with an added partition: read from its start, which should be 0.
            if first > 0:
                self._data_loss(key, 0, first, "a partition added after the query started begins there")
            begin = first
        if begin >= stop:
            return []
        if begin < first:
            self._data_loss(key, begin, first, "deleted by remote retention or quarantined")
            begin = first
        if stop > after_last:
            self._data_loss(
                key, max(begin, after_last), stop, "no longer at the remote tier's end (quarantined?)"
            )
            stop = after_last
        for lo, hi in _holes(manifest, begin, stop):
            self._data_loss(key, lo, hi, "a hole inside the remote tier (a quarantined or missing segment)")
        if begin >= stop:
            return []
        window = PartitionWindow(tp, begin, stop)
        return plan_partition(reader, manifest, window, max_split_bytes=self.opts.max_split_bytes)

    def _plan_hybrid(
        self, reader: RemoteReader, begin_at: dict[Key, int], end_at: dict[Key, int]
    ) -> list[InputPartition]:
        """continueFromKafka: each partition's [begin, stop) cut at the tier's holdings of now (hybrid.py).
        What neither side seems to hold is looked at again with fresh manifests before it is data loss
        (the tier may have taken it over since they were read, and the brokers trimmed it)."""
        assert self._brokers is not None
        for fresh in (False, True):
            missing = any(k not in self._manifests and k not in self._broker_keys for k in end_at)
            self._refresh(reader, force=fresh or missing)
            # Asked once per pass, and only when a range leaves the tier: a batch of history the tier
            # holds whole needs no broker round trip.
            offsets: tuple[dict[Key, int], dict[Key, int]] | None = None
            planned: list[tuple[Key, Any]] = []
            for key, stop in sorted(end_at.items()):
                begin = begin_at.get(key)
                if begin is not None:
                    if stop < begin:  # after a restart, an end gone back: see _plan
                        self._read_to[key] = max(begin, self._read_to.get(key, begin))
                    begin = max(begin, self._read_to.get(key, begin))
                    if begin >= stop:
                        continue
                known = self._manifests.get(key)
                manifest = known[1] if known is not None else None
                if begin is not None:
                    tier_only = pieces(begin, stop, held(manifest), None, None)
                    if all(piece.source == TIER for piece in tier_only):
                        planned.extend((key, (TIER, piece.start, piece.end)) for piece in tier_only)
                        continue
                if offsets is None:
                    on_brokers = [k for k in end_at if k in self._broker_keys]
                    offsets = self._brokers.starts(on_brokers), self._brokers.ends(on_brokers)
                lows, highs = offsets
                if begin is None:
                    # A partition that appeared after the query started: from its start, as Kafka's source.
                    first, _ = _hybrid_bounds(manifest, lows.get(key), highs.get(key))
                    begin = 0 if first is None else first
                    if begin > 0:
                        planned.append((key, (LOST_PIECE, 0, begin)))
                if begin >= stop:
                    continue
                for piece in pieces(begin, stop, held(manifest), lows.get(key), highs.get(key)):
                    planned.append((key, (piece.source, piece.start, piece.end)))
            if fresh or all(source != LOST_PIECE for _, (source, _, _) in planned):
                break
        out: list[InputPartition] = []
        for key, (source, lo, hi) in planned:
            if source == TIER:
                tp, manifest = self._manifests[key]
                window = PartitionWindow(tp, lo, hi)
                planned_splits = plan_partition(
                    reader, manifest, window, max_split_bytes=self.opts.max_split_bytes
                )
                out.extend(_runs(planned_splits, self.opts.max_split_bytes))
            elif source == KAFKA:
                out.extend(_kafka_ranges(key, lo, hi, None))
            else:
                _lost(self.opts, key, lo, hi, "deleted by retention, or quarantined, on both sides")
        return out

    def _data_loss(self, key: Key, lo: int, hi: int, why: str) -> None:
        what = f"{key[0]}-{key[1]}: offsets {lo}..{hi - 1} are not in the remote tier ({why})"
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                f"{what}; some data may have been lost. Set failOnDataLoss=false to skip them with a warning"
            )
        _log.warning("%s: skipped (failOnDataLoss=false)", what)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge: the remote tier is read, never consumed."""
        self._raise_high(self._keys(end))


def _pending(manifest: Manifest, start: int, end: int) -> Pending:
    """[start, end) of a partition with the stored sizes of the segments serving it."""
    segments = tuple(
        (r.last_offset + 1, r.segment.size_bytes)
        for r in manifest.cover().ranges
        if r.last_offset >= start and r.first_offset < end
    )
    return Pending(start, max(start, end), segments)


def _holes(manifest: Manifest, lo: int, hi: int) -> list[tuple[int, int]]:
    """Offset ranges inside [lo, hi) that no served segment holds. Offsets between a segment's last offset
    and its ``next_offset`` (the next segment's base on the broker) never existed, so they are no hole."""
    out = []
    ranges = manifest.cover().ranges
    for prev, nxt in zip(ranges, ranges[1:], strict=False):
        held_to = max(prev.last_offset + 1, prev.segment.next_offset)
        a, b = max(held_to, lo), min(nxt.first_offset, hi)
        if a < b:
            out.append((a, b))
    return out


class TierkeeperDataSource(DataSource):  # type: ignore[misc]
    """The remote tier as a DataFrame (batch and streaming); pushed filters prune when the session
    enables Python filter pushdown, and are simply left to Spark when it does not."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        # The same for batch and streaming reads: no other option is looked at here (Spark calls schema()
        # before it says which kind of read this is; the reader or streamReader parses the options).
        headers = parse_include_headers(self.options)
        return SCHEMA + (HEADERS_COLUMN if headers else "")

    def reader(self, schema: Any) -> DataSourceReader:
        return _BatchReader(parse_options(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _StreamReader(parse_options(self.options, streaming=True))


TierkeeperPushdownDataSource = TierkeeperDataSource
"""The name of the pushdown variant before one class served both (kept for existing code)."""
