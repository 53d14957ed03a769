"""The options of ``spark.read.format("tierkeeper")``, parsed once into :class:`ScanOptions`.

Names and meanings follow Spark's Kafka source where they apply (``startingOffsets``, ``endingOffsets``,
``startingTimestamp``, ``endingTimestamp``, ``startingOffsetsByTimestamp``, ``endingOffsetsByTimestamp``,
``startingOffsetsByTimestampStrategy``, ``kafka.isolation.level`` (Kafka's default read_uncommitted;
the old name ``isolation.level`` is refused with the new one), ``includeHeaders``, ``failOnDataLoss``,
``minPartitions``, ``maxRecordsPerPartition``, ``maxOffsetsPerTrigger``, and the subscriptions
``subscribe`` (comma-separated topics), ``subscribePattern`` and ``assign``); options of the Kafka
source that cannot apply to the remote tier (broker connection ``kafka.*`` but the isolation level,
unless ``continueFromKafka=true`` reads the brokers' tail with them, ``minOffsetsPerTrigger``,
``maxTriggerDelay``, ``groupIdPrefix``) are refused with a one-line reason.
``maxBytesPerTrigger`` is ours (stored segment bytes, exact from the manifests). The rest say where the
remote tier is: ``remote`` (URL), ``topic`` (one topic, the same as ``subscribe`` naming one), ``topicId``
(when a name has several incarnations), ``endpointUrl`` / ``region`` / ``pathStyle`` / ``anonymous``
(as the CLI flags) and ``storage.<key>`` for any other fsspec storage option (value parsed as JSON when
it parses). Option names are case-insensitive, as Spark's are.

Storage options can hold credentials: they live only in :class:`StorageSpec`, whose ``repr`` shows the
option names, never values, and no error message built here quotes a storage option's value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from storage_core.adapters.kafka_tail import KafkaSpec
from storage_core.errors import ConfigError
from storage_core.remote.reader import Isolation
from storage_core.remote.scan_plan import DEFAULT_SPLIT_BYTES

EARLIEST, LATEST = -2, -1
"""Offsets in the JSON form of startingOffsets / endingOffsets, as in the Kafka source."""


@dataclass(frozen=True)
class StorageSpec:
    """Where the remote tier is and how to reach it; picklable, shipped to every task."""

    url: str
    options: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"StorageSpec(url={self.url!r}, options=<{len(self.options)} hidden>)"

    def open(self) -> Any:
        from storage_core.adapters.store import RemoteStore

        return RemoteStore(self.url, self.options)


OffsetSpec = str | dict[tuple[str, int], int]
"""``"earliest"``, ``"latest"`` or a per-(topic, partition) offset map (-2 earliest, -1 latest)."""


DEFAULT_REFRESH_INTERVAL_MS = 10_000


@dataclass(frozen=True)
class ScanOptions:
    storage: StorageSpec
    topic: str
    """The one topic read (``topic``, or ``subscribe`` naming one); "" when ``topics``, ``pattern`` or
    ``assign`` say what is read."""
    topic_id: str | None = None
    topics: tuple[str, ...] = ()
    """``subscribe`` naming several topics."""
    pattern: str | None = None
    """``subscribePattern``: every tiered topic whose whole name matches (looked at on each refresh)."""
    assign: dict[str, frozenset[int]] | None = None
    """``assign``: these partitions of these topics only."""
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    starting_timestamp: int | None = None
    starting_by_timestamp: dict[tuple[str, int], int] | None = None
    ending_timestamp: int | None = None
    ending_by_timestamp: dict[tuple[str, int], int] | None = None
    no_match_starts_at_latest: bool = False
    """startingOffsetsByTimestampStrategy=latest: a start timestamp newer than every tiered record starts
    at the remote end instead of failing the query (the Kafka source's default is to fail)."""
    isolation: Isolation = Isolation.READ_UNCOMMITTED
    """``kafka.isolation.level``; Kafka's consumer default, so a union with ``format("kafka")`` (same
    option, same default) drops aborted records on both sides or on neither."""
    include_headers: bool = False
    fail_on_data_loss: bool = True
    max_split_bytes: int = DEFAULT_SPLIT_BYTES
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    refresh_interval_ms: int = DEFAULT_REFRESH_INTERVAL_MS
    """Streaming: a trigger reuses the manifests read less than this long ago (no listing at all)."""
    max_offsets_per_trigger: int | None = None
    """Streaming: at most about this many offsets per micro-batch, prorated over partitions (Kafka's)."""
    max_bytes_per_trigger: int | None = None
    """Streaming: at most this many stored segment bytes per micro-batch (at least one segment)."""
    kafka: KafkaSpec | None = None
    """``continueFromKafka=true``: the brokers to read what the tier does not hold (each partition's tail
    past the tier's end), with the ``kafka.*`` options as the consumer's properties."""


_KNOWN = {
    "remote",
    "topic",
    "topicid",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "startingoffsetsbytimestamp",
    "endingtimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "minpartitions",
    "maxrecordsperpartition",
    "subscribe",
    "subscribepattern",
    "assign",
    "kafka.isolation.level",
    "includeheaders",
    "failondataloss",
    "maxbytespersplit",
    "manifestrefreshintervalms",
    "maxoffsetspertrigger",
    "maxbytespertrigger",
    "continuefromkafka",
    "endpointurl",
    "region",
    "pathstyle",
    "anonymous",
    "path",
}


_NO_ADMISSION = "PySpark's Python stream API has no admission control (maxOffsetsPerTrigger works)"

_NOT_APPLICABLE = {
    "minoffsetspertrigger": _NO_ADMISSION,
    "maxtriggerdelay": _NO_ADMISSION,
    "groupidprefix": "the remote tier is read without a consumer group",
    "fetchoffset.numretries": "offsets come from the remote tier's metadata, not from brokers",
    "fetchoffset.retryintervalms": "offsets come from the remote tier's metadata, not from brokers",
    "kafkaconsumer.polltimeoutms": "the remote tier is read without a Kafka consumer",
}
"""Kafka source options that cannot apply to the remote tier, with why (a clearer refusal than
"unknown option")."""


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {name} must be true or false, got {raw!r}")
    return value == "true"


def _int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"option {name} must be an integer, got {raw!r}") from None


def _per_partition(name: str, raw: str, example: str) -> dict[tuple[str, int], int]:
    """``{"t": {"0": 23, "1": -2}}`` -> {("t", 0): 23, ("t", 1): -2} (Kafka's JSON)."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        raise ConfigError(f"option {name} is neither earliest/latest nor JSON: {raw!r}") from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise ConfigError(f'option {name} must look like {{"{example}": {{"0": 23}}}}, got {raw!r}')
    out: dict[tuple[str, int], int] = {}
    for topic, offsets in parsed.items():
        for p, offset in offsets.items():
            try:
                out[(topic, int(p))] = int(offset)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"option {name}: {topic} partition {p!r} -> {offset!r} is not two integers"
                ) from None
    return out


def _subscription(
    opts: Mapping[str, str],
) -> tuple[str, tuple[str, ...], str | None, dict[str, frozenset[int]] | None]:
    """(topic, topics, pattern, assign) from exactly one of topic, subscribe, subscribePattern, assign."""
    given = [k for k in ("topic", "subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise ConfigError(
            "give exactly one of the options topic, subscribe (comma-separated topics), subscribePattern "
            f"or assign (JSON of topic -> partitions); got {', '.join(given) or 'none'}"
        )
    (key,) = given
    raw = opts[key].strip()
    if key == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as e:
            raise ConfigError(f"option subscribePattern is not a regular expression: {e}") from None
        return "", (), raw, None
    if key == "assign":
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = None
        if not (
            isinstance(parsed, dict)
            and parsed
            and all(isinstance(v, list) and all(type(p) is int for p in v) for v in parsed.values())
        ):
            raise ConfigError(f'option assign must look like {{"topicA": [0, 1]}}, got {raw!r}')
        assign = {t: frozenset(ps) for t, ps in parsed.items()}
        return (next(iter(assign)) if len(assign) == 1 else ""), (), None, assign
    topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
    if not topics:
        raise ConfigError(f"option {key} names no topic")
    return (topics[0], (), None, None) if len(topics) == 1 else ("", topics, None, None)


def _offsets(name: str, raw: str | None, default: str, topic: str) -> OffsetSpec:
    if raw is None:
        return default
    if raw.strip().lower() in ("earliest", "latest"):
        return raw.strip().lower()
    return _per_partition(name, raw, topic)


def _storage(opts: Mapping[str, str]) -> StorageSpec:
    from storage_core.adapters.store import storage_option_value, storage_options_from_flags

    url = opts.get("remote") or opts.get("path")
    if not url:
        raise ConfigError('option remote is required (the remote tier URL, e.g. "s3://bucket/prefix")')
    options = storage_options_from_flags(
        endpoint_url=opts.get("endpointurl"),
        region=opts.get("region"),
        anonymous=_bool("anonymous", opts.get("anonymous", "false")),
        path_style=_bool("pathStyle", opts.get("pathstyle", "false")),
    )
    for key, raw in opts.items():
        if key.startswith("storage."):
            options[key[len("storage.") :]] = storage_option_value(raw)
    return StorageSpec(url, options)


def parse_include_headers(options: Mapping[str, str]) -> bool:
    """``includeHeaders`` alone (what the schema depends on), for batch and streaming reads alike."""
    raw = next((v for k, v in options.items() if k.lower() == "includeheaders"), "false")
    return _bool("includeHeaders", raw)


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> ScanOptions:
    """Parse the DataSource options (raising ``ConfigError`` with a one-line reason for bad ones)."""
    opts = {k.lower(): v for k, v in options.items()}
    hybrid = _bool("continueFromKafka", opts.get("continuefromkafka", "false"))
    for key in sorted(opts):
        if key == "isolation.level":
            raise ConfigError(
                "option isolation.level is now kafka.isolation.level, as in the Kafka source "
                "(default read_uncommitted, Kafka's)"
            )
        if hybrid and (key.startswith("kafka.") or key == _POLL_TIMEOUT):
            continue
        if key in _NOT_APPLICABLE or (key.startswith("kafka.") and key not in _KNOWN):
            why = _NOT_APPLICABLE.get(
                key,
                "the remote tier is read from object storage, not from brokers "
                "(continueFromKafka=true reads the brokers' tail with the kafka.* options)",
            )
            raise ConfigError(f"option {key} of the Kafka source does not apply to format tierkeeper: {why}")
    kafka = _kafka(opts) if hybrid else None
    unknown = sorted(
        k
        for k in opts
        if k not in _KNOWN
        and not k.startswith("storage.")
        and not (hybrid and (k == _POLL_TIMEOUT or k.startswith("kafka.")))
    )
    if unknown:
        raise ConfigError(f"unknown option(s) for format tierkeeper: {', '.join(unknown)}")
    topic, topics, pattern, assign = _subscription(opts)
    if "topicid" in opts and not topic:
        raise ConfigError("option topicId chooses the incarnation of one topic: name one topic with it")
    example = topic or (topics[0] if topics else "topic")
    named = None if pattern is not None else set(assign) if assign is not None else set(topics or (topic,))
    isolation_raw = opts.get("kafka.isolation.level", Isolation.READ_UNCOMMITTED.value).strip().lower()
    try:
        isolation = Isolation(isolation_raw)
    except ValueError:
        raise ConfigError(
            f"option kafka.isolation.level must be read_committed or read_uncommitted, got {isolation_raw!r}"
        ) from None
    starting = _offsets(
        "startingOffsets", opts.get("startingoffsets"), "latest" if streaming else "earliest", example
    )
    ending = _offsets("endingOffsets", opts.get("endingoffsets"), "latest", example)
    if not streaming and starting == "latest":
        raise ConfigError(
            "option startingOffsets=latest is not valid for a batch query (nothing would be read)"
        )
    if ending == "earliest":
        raise ConfigError("option endingOffsets=earliest is not valid (nothing would be read)")
    for key, name in _ENDINGS.items():
        if streaming and key in opts:
            raise ConfigError(f"option {name} is for batch queries only")
    for key, name in _STREAM_ONLY.items():
        if not streaming and key in opts:
            raise ConfigError(f"option {name} is for streaming queries only")
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        others = sorted({t for t, _ in spec} - named) if named is not None and isinstance(spec, dict) else []
        if others:
            raise ConfigError(f"option {name} names topics this query does not read: {', '.join(others)}")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}"
        )
    split_bytes = _int("maxBytesPerSplit", opts.get("maxbytespersplit", str(DEFAULT_SPLIT_BYTES)))
    if split_bytes < 1:
        raise ConfigError(f"option maxBytesPerSplit must be >= 1, got {split_bytes}")
    refresh = _optional_int(opts, "manifestRefreshIntervalMs", minimum=0)
    return ScanOptions(
        storage=_storage(opts),
        topic=topic,
        topic_id=opts.get("topicid"),
        topics=topics,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp=_optional_int(opts, "startingTimestamp"),
        starting_by_timestamp=_optional_per_partition(opts, "startingOffsetsByTimestamp", example),
        ending_timestamp=_optional_int(opts, "endingTimestamp"),
        ending_by_timestamp=_optional_per_partition(opts, "endingOffsetsByTimestamp", example),
        no_match_starts_at_latest=strategy == "latest",
        isolation=isolation,
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        max_split_bytes=split_bytes,
        min_partitions=_optional_int(opts, "minPartitions", minimum=1),
        max_records_per_partition=_optional_int(opts, "maxRecordsPerPartition", minimum=1),
        refresh_interval_ms=DEFAULT_REFRESH_INTERVAL_MS if refresh is None else refresh,
        max_offsets_per_trigger=_optional_int(opts, "maxOffsetsPerTrigger", minimum=1),
        max_bytes_per_trigger=_optional_int(opts, "maxBytesPerTrigger", minimum=1),
        kafka=kafka,
    )


_POLL_TIMEOUT = "kafkaconsumer.polltimeoutms"

_KAFKA_OWN = {
    "auto.offset.reset": "where to start is startingOffsets",
    "enable.auto.commit": "nothing is committed: offsets are in Spark's checkpoint",
    "enable.partition.eof": "the reader needs it to find a range's end",
    "isolation.level": "kafka.isolation.level is given as itself",
    "key.deserializer": "keys are read as bytes",
    "value.deserializer": "values are read as bytes",
}
"""Consumer properties the hybrid read sets itself (the Kafka source refuses most of them too)."""


def _kafka(opts: Mapping[str, str]) -> KafkaSpec:
    config: dict[str, str] = {}
    for key, raw in opts.items():
        if key.startswith("kafka.") and key != "kafka.isolation.level":
            prop = key[len("kafka.") :]
            if prop in _KAFKA_OWN:
                raise ConfigError(f"option {key} cannot be set with continueFromKafka: {_KAFKA_OWN[prop]}")
            config[prop] = raw
    if "bootstrap.servers" not in config:
        raise ConfigError("option continueFromKafka=true needs kafka.bootstrap.servers (the brokers' tail)")
    poll = _optional_int(opts, "kafkaConsumer.pollTimeoutMs", minimum=1)
    return KafkaSpec(config, 120_000 if poll is None else poll)


_STREAM_ONLY = {"maxoffsetspertrigger": "maxOffsetsPerTrigger", "maxbytespertrigger": "maxBytesPerTrigger"}

_ENDINGS = {
    "endingoffsets": "endingOffsets",
    "endingtimestamp": "endingTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
}


def _optional_int(opts: Mapping[str, str], name: str, *, minimum: int | None = None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    value = _int(name, raw.strip())
    if minimum is not None and value < minimum:
        raise ConfigError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _optional_per_partition(
    opts: Mapping[str, str], name: str, topic: str
) -> dict[tuple[str, int], int] | None:
    raw = opts.get(name.lower())
    return None if raw is None else _per_partition(name, raw, topic)
