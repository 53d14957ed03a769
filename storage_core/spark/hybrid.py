"""``continueFromKafka``: one read of each partition's history from the remote tier and its tail from the
brokers, split at exactly the offset where the tier stops holding it.

Per partition, a planned offset range [start, end) is cut into pieces (:func:`pieces`, pure): offsets a
tiered segment holds are read from the tier, offsets the brokers still hold (at or past their log start)
from the brokers, and the rest is data loss (``failOnDataLoss``). The cut is recomputed at every plan
from the manifests of then, so as tiering advances more of each range comes from the tier; the range
itself (the stream's offsets, Kafka's) does not depend on where it is read from, so a checkpoint means
the same thing whichever side served it: no gap, no duplicate.

The offsets around the pieces: ``earliest`` is the lower of the tier's first offset and the brokers'
log start; ``latest`` the higher of the tier's end and the brokers' end under ``kafka.isolation.level``
(the last stable offset for read_committed, as the Kafka source's consumer sees it, else the high
watermark).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.kafka_tail import KafkaSpec
from storage_core.errors import ConfigError
from storage_core.remote.catalog import list_partitions, list_topics
from storage_core.remote.layout import TopicPartitionId
from storage_core.remote.metadata import Manifest
from storage_core.remote.reader import Isolation, RemoteReader
from storage_core.spark.options import ScanOptions

Key = tuple[str, int]
TIER, KAFKA, LOST = "tier", "kafka", "lost"


@dataclass(frozen=True)
class Piece:
    source: str
    """TIER, KAFKA or LOST (held by neither)."""
    start: int
    end: int


def held(manifest: Manifest | None) -> list[tuple[int, int]]:
    """The offset ranges [a, b) the tier holds, merged. Offsets between a segment's last offset and its
    ``next_offset`` (the next segment's base on the broker) never existed: they count as held."""
    out: list[tuple[int, int]] = []
    if manifest is None:
        return out
    for r in manifest.cover().ranges:
        a, b = r.first_offset, max(r.last_offset + 1, r.segment.next_offset)
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def pieces(
    start: int, end: int, tier: list[tuple[int, int]], broker_start: int | None, broker_end: int | None
) -> list[Piece]:
    """[start, end) cut into contiguous pieces in offset order: the tier's where it holds them (read
    without a broker round trip, and past the brokers' retention), else the brokers' within [their log
    start, their end), else lost. ``broker_start`` None: the brokers hold nothing of the partition."""
    out: list[Piece] = []

    def add(source: str, a: int, b: int) -> None:
        if a >= b:
            return
        if out and out[-1].source == source and out[-1].end == a:
            out[-1] = Piece(source, out[-1].start, b)
        else:
            out.append(Piece(source, a, b))

    def untiered(a: int, b: int) -> None:
        if broker_start is None or broker_end is None:
            add(LOST, a, b)
            return
        add(LOST, a, min(b, broker_start))
        add(KAFKA, max(a, broker_start), min(b, broker_end))
        add(LOST, max(a, broker_end), b)

    at = start
    for a, b in tier:
        if b <= at or a >= end:
            continue
        untiered(at, min(a, end))
        add(TIER, max(a, at), min(b, end))
        at = min(b, end)
    if at < end:
        untiered(at, end)
    return out


class Brokers:
    """The driver's view of the brokers for a hybrid read: which partitions the subscription names there,
    and their offsets. Opened lazily, so a reader Spark pickles never holds a client."""

    def __init__(self, spec: KafkaSpec, isolation: Isolation) -> None:
        self._spec = spec
        self._committed = isolation is Isolation.READ_COMMITTED
        self._admin: KafkaAdmin | None = None

    def __getstate__(self) -> dict[str, Any]:
        # A reader Spark pickles for its tasks after the driver used it: the copy opens its own client.
        return {**self.__dict__, "_admin": None}

    def _client(self) -> KafkaAdmin:
        if self._admin is None:
            config = {k: v for k, v in self._spec.config.items() if k != "bootstrap.servers"}
            # Consumer-only properties would make the admin client warn or refuse: leave them out.
            config = {k: v for k, v in config.items() if not k.startswith(("fetch.", "max.poll", "group."))}
            self._admin = KafkaAdmin(self._spec.bootstrap_servers, config)
        return self._admin

    def partitions(self, opts: ScanOptions) -> set[Key]:
        listed = self._client().partitions()
        if opts.pattern is not None:
            pattern = re.compile(opts.pattern)
            return {(t, p) for t, ps in listed.items() if pattern.fullmatch(t) for p in ps}
        if opts.assign is not None:
            return {(t, p) for t, ps in opts.assign.items() for p in ps if p in listed.get(t, ())}
        return {(t, p) for t in (opts.topics or (opts.topic,)) for p in listed.get(t, ())}

    def topic_ids(self, keys: Iterable[Key]) -> dict[str, str]:
        """The live incarnation (Kafka's 22-character topic id) of the topics of ``keys`` (partitions the
        brokers listed)."""
        names = sorted({t for t, _ in keys})
        if not names:
            return {}
        return {info.topic: info.topic_id for info in self._client().describe(names).values()}

    def starts(self, keys: Iterable[Key]) -> dict[Key, int]:
        return self._client().log_start_offsets(keys)

    def ends(self, keys: Iterable[Key]) -> dict[Key, int]:
        client = self._client()
        return client.last_stable_offsets(keys) if self._committed else client.high_watermarks(keys)

    def offsets_at(self, timestamps: Mapping[Key, int]) -> dict[Key, int | None]:
        """Per partition, the brokers' first offset with a record timestamp >= its timestamp (None: none)."""
        return self._client().offsets_for_times(timestamps, self._committed)


def tiered_partitions(
    reader: RemoteReader, opts: ScanOptions, live_ids: Mapping[str, str] | None = None
) -> dict[Key, TopicPartitionId]:
    """The subscription's tiered partitions; a topic not tiered (yet) has none here (the brokers may).
    ``live_ids``: the brokers' incarnation of each topic (a hybrid read). Only that incarnation's history
    is the topic's: a tier holding only an older one (the topic deleted and created again under its name)
    holds none of it, and reading it before the brokers' tail would join two topics' offsets."""
    listed = list_topics(reader.store, reader.layout)
    if opts.pattern is not None:
        pattern = re.compile(opts.pattern)
        names = sorted({n for n, _ in listed if pattern.fullmatch(n)})
    elif opts.assign is not None:
        names = sorted(opts.assign)
    else:
        names = list(opts.topics or (opts.topic,))
    incarnations: dict[str, set[str]] = {}
    for name, tid in listed:
        incarnations.setdefault(name, set()).add(tid)
    out: dict[Key, TopicPartitionId] = {}
    for name in names:
        if name not in incarnations:
            continue
        topic_id = opts.topic_id
        live = None if live_ids is None else live_ids.get(name)
        if live is not None:
            if topic_id is not None and topic_id != live:
                raise ConfigError(
                    f"option topicId {topic_id} is not the brokers' incarnation of topic {name} ({live}): "
                    "continueFromKafka reads one incarnation from the tier and the brokers"
                )
            if live not in incarnations[name]:
                continue  # only older incarnations are tiered: none of this topic's history
            topic_id = live
        tp0 = reader.resolve(name, 0, topic_id, choose_with="option topicId")
        wanted = opts.assign.get(name) if opts.assign is not None else None
        for tp in list_partitions(reader.store, reader.layout, tp0.topic, tp0.topic_id):
            if wanted is None or tp.partition in wanted:
                out[(tp.topic, tp.partition)] = tp
    return out
