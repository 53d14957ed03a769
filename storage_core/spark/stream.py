"""The stream reader of ``spark.readStream.format("tierkeeper")``, as Spark's Kafka source behaves.

Offsets are Kafka's JSON; each micro-batch is planned from the manifests of (at most
``manifestRefreshIntervalMs``) before, packed into as few tasks per partition as ``maxBytesPerSplit``
allows, and checked for offsets the tier no longer holds (``failOnDataLoss``). storage_core/spark/DESIGN.md,
"The loop of one stream", has the rules and their reasons.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from storage_core.errors import ConfigError, DataLossError
from storage_core.remote.layout import TopicPartitionId
from storage_core.remote.metadata import Manifest
from storage_core.remote.reader import RemoteReader
from storage_core.remote.scan_plan import PartitionWindow, ScanSplit, plan_partition
from storage_core.spark.admission import Pending, admit
from storage_core.spark.hybrid import KAFKA, TIER, Brokers, held, pieces, tiered_partitions
from storage_core.spark.hybrid import LOST as LOST_PIECE
from storage_core.spark.hybrid_offsets import (
    hybrid_bounds,
    hybrid_start,
    offsets_at,
    report_lost,
    times_asked,
)
from storage_core.spark.options import ScanOptions
from storage_core.spark.tasks import kafka_tasks, open_reader, read_task, tier_tasks
from storage_core.spark.windows import Pruning, partition_window, topic_partitions

_log = logging.getLogger(__name__)


Key = tuple[str, int]
"""(topic, partition): how the stream reader keys its offsets."""


def offsets_json(offsets: dict[Key, int]) -> dict[str, dict[str, int]]:
    """``{"topic": {"0": next offset}}``: Kafka's JSON, which Spark writes to the checkpoint."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


class StreamReader(DataSourceStreamReader):  # type: ignore[misc]
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
            self._driver_reader = open_reader(self.opts)
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
            first, after_last = hybrid_bounds(manifest, lows.get(key), highs.get(key))
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
            asked = times_asked(self.opts, bounds, start=True)
            at_times = offsets_at(reader, self._brokers, tiered, self._broker_keys, asked)
            for key, (first, after_last) in bounds.items():
                out[key] = hybrid_start(self.opts, key, first, after_last, at_times)
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
            out.extend(tier_tasks(planned, self.opts.max_split_bytes))
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
                    first, _ = hybrid_bounds(manifest, lows.get(key), highs.get(key))
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
                out.extend(tier_tasks(planned_splits, self.opts.max_split_bytes))
            elif source == KAFKA:
                out.extend(kafka_tasks(key, lo, hi, None))
            else:
                report_lost(self.opts, key, lo, hi, "deleted by retention, or quarantined, on both sides")
        return out

    def _data_loss(self, key: Key, lo: int, hi: int, why: str) -> None:
        what = f"{key[0]}-{key[1]}: offsets {lo}..{hi - 1} are not in the remote tier ({why})"
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                f"{what}; some data may have been lost. Set failOnDataLoss=false to skip them with a warning"
            )
        _log.warning("%s: skipped (failOnDataLoss=false)", what)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(self.opts, partition)

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
