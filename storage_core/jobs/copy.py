"""The copy job: which partitions of a log dir to copy, the refusals, the last stable offsets, then every
partition's copy on threads of this process or as tasks of a local Spark session; a typed report.

``tierkeeper copy`` (and so the operator's copy Jobs) and standalone mode's in-process executor both run
:func:`run_copy`; the executor builds its :class:`CopyOptions` from the round's
:class:`~storage_core.reconcile.requests.CopyRequest` with :func:`copy_options`, the command from its
flags, and a test proves that a request's Job arguments parse into the same options.

Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``, ...) are never tiering
candidates: a copy of a whole log dir passes over them without a word. A user topic that cannot be
tiered is refused with one line (``tiering.eligibility``), and the others are still copied.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from storage_core.adapters.kafka_client_config import kafka_admin
from storage_core.errors import ConfigError
from storage_core.formats.segment_files import KAFKA_INTERNAL_TOPICS, TopicPartition
from storage_core.logdir import LogDirs
from storage_core.reconcile.requests import CopyRequest
from storage_core.remote.store_api import ObjectStore
from storage_core.throttle import RateLimiter, limited
from storage_core.tiering.eligibility import copy_refusal
from storage_core.tiering.partition_copy import PartitionCopyResult, copy_partition
from storage_core.tiering.plan import CopyTask


@dataclass(frozen=True)
class CopyOptions:
    log_dirs: tuple[str, ...]
    """Every entry of the broker's ``log.dirs`` (JBOD: several); each partition is read from the one
    holding it."""
    remote_url: str
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """May hold credentials: left out of the repr."""
    bootstrap_servers: str | None = None
    """Kafka to read the topics' configs and last stable offsets from; None: the caller vouches that
    every topic is tierable (``--assume-tierable``)."""
    kafka_config: Mapping[str, str] = field(default_factory=dict, repr=False)
    assignment: tuple[tuple[str, int], ...] | None = None
    """Exactly these partitions (a listed one missing from every log dir fails); None: every partition
    of the log dirs (of ``topics`` when given), Kafka's internal topics left out."""
    topics: frozenset[str] | None = None
    broker_id: int | None = None
    parallelism: int = 4
    segments_in_flight: int | None = None
    max_bytes_per_second: int | None = None
    fsync: bool = True
    engine: str = "threads"
    spark_conf: Mapping[str, str] = field(default_factory=dict)


@dataclass
class CopyReport:
    partitions: list[PartitionCopyResult] = field(default_factory=list)
    refused_topics: list[str] = field(default_factory=list)
    """One line per topic refused before anything was written (the reason included)."""

    @property
    def failed(self) -> list[PartitionCopyResult]:
        return [p for p in self.partitions if p.error]

    @property
    def copied_segments(self) -> int:
        return sum(p.copied_segments for p in self.partitions)

    @property
    def copied_bytes(self) -> int:
        return sum(p.copied_bytes for p in self.partitions)

    def rows(self) -> list[dict[str, Any]]:
        """The per-partition results as plain data (the ``--json`` output and the Job result's input)."""
        return [dataclasses.asdict(p) for p in self.partitions]

    def summary(self) -> dict[str, Any]:
        return {
            "partitions": self.rows(),
            "copied_segments": self.copied_segments,
            "copied_bytes": self.copied_bytes,
            "failed_partitions": len(self.failed),
            "refused_topics": list(self.refused_topics),
        }


def copy_options(request: CopyRequest, kafka_config: Mapping[str, str]) -> CopyOptions:
    """What the copy Job's command makes of ``request``'s arguments, for an in-process run.
    ``kafka_config``: the client properties (the request's plus the mounted Secret's)."""
    return CopyOptions(
        log_dirs=request.log_dirs,
        remote_url=request.remote.url,
        storage_options=dict(request.remote.storage_options),
        bootstrap_servers=request.kafka.bootstrap_servers,
        kafka_config=dict(kafka_config),
        assignment=tuple((topic, p) for topic, partitions in request.assignment for p in partitions),
        broker_id=request.broker_id,
        parallelism=request.parallelism,
        max_bytes_per_second=request.max_bytes_per_second,
    )


AdminFactory = Callable[[str, dict[str, str]], Any]


def run_copy(
    options: CopyOptions,
    store: ObjectStore,
    *,
    progress: Callable[[int], None] | None = None,
    admin_factory: AdminFactory = kafka_admin,
) -> CopyReport:
    """Copy what ``options`` names; a partition's failure is in its result, never raised. Raises
    ``TierkeeperError`` only for what stops the whole run (an unreadable log dir, Kafka unreachable)."""
    log_dirs = LogDirs(options.log_dirs)
    if options.assignment is not None:
        wanted = list(options.assignment)
    else:
        wanted = [
            (p.topic, p.partition)
            for p in log_dirs.partitions(set(options.topics) if options.topics else None)
            if p.topic not in KAFKA_INTERNAL_TOPICS or (options.topics and p.topic in options.topics)
        ]
    report = CopyReport()
    lso: dict[tuple[str, int], int] = {}
    configs: dict[str, dict[str, str]] = {}
    if options.bootstrap_servers:
        admin = admin_factory(options.bootstrap_servers, dict(options.kafka_config))
        configs = {topic: admin.topic_configs(topic) for topic in sorted({topic for topic, _ in wanted})}
        # One line per refused topic, before anything is written; the tasks carry the configs too, so a
        # copy driven from elsewhere (Spark) refuses the same way.
        refused = {}
        for topic, topic_configs in configs.items():
            refusal = copy_refusal(topic, topic_configs)
            if refusal is not None:
                refused[topic] = str(refusal)
        report.refused_topics = list(refused.values())
        wanted = [(topic, partition) for topic, partition in wanted if topic not in refused]
        lso = admin.last_stable_offsets(wanted)
    checkpoints = log_dirs.checkpoints()
    # A partition Kafka is moving between this broker's dirs is left for a later run: its segments are
    # copied into the other dir and the old directory deleted under the copy's feet.
    moving = log_dirs.moving({topic for topic, _ in wanted})
    report.partitions = [
        PartitionCopyResult(
            topic,
            partition,
            error=f"{topic}-{partition}: being moved between log dirs (a -future directory); copied "
            "once the move is done",
        )
        for topic, partition in wanted
        if TopicPartition(topic, partition) in moving
    ]
    wanted = [(t, p) for t, p in wanted if TopicPartition(t, p) not in moving]
    holders = {(t, p): log_dirs.dir_of(TopicPartition(t, p)) for t, p in wanted}
    report.partitions += [
        PartitionCopyResult(t, p, error=f"{t}-{p}: no partition directory in {log_dirs.describe()}")
        for (t, p), holder in holders.items()
        if holder is None
    ]
    tasks = [
        CopyTask(
            log_dir=str(holder.path),
            topic=topic,
            partition=partition,
            remote_url=options.remote_url,
            storage_options=dict(options.storage_options),
            last_stable_offset=lso.get((topic, partition)),
            high_watermark=checkpoints.high_watermarks.get(TopicPartition(topic, partition)),
            broker_id=options.broker_id,
            segments_in_flight=options.segments_in_flight,
            topic_configs=configs.get(topic) if options.bootstrap_servers else None,
        )
        for (topic, partition), holder in holders.items()
        if holder is not None
    ]
    if options.engine == "spark":
        report.partitions += _run_on_spark(options, tasks)
    elif options.engine == "threads":
        limiter = RateLimiter(options.max_bytes_per_second) if options.max_bytes_per_second else None
        lock = threading.Lock()

        def advance(n: int) -> None:
            if progress is not None:
                with lock:
                    progress(n)

        report_bytes = limited(advance, limiter)
        with ThreadPoolExecutor(max_workers=options.parallelism) as pool:
            report.partitions += pool.map(lambda t: copy_partition(t, store, report_bytes), tasks)
    else:
        raise ConfigError(f"unknown copy engine {options.engine!r}")
    return report


def _run_on_spark(options: CopyOptions, tasks: list[CopyTask]) -> list[PartitionCopyResult]:
    from storage_core.jobs.copy_spark import run_copy_spark, spark_master
    from storage_core.jobs.spark_session import spark_session

    spark = spark_session("tierkeeper-copy", spark_master(options.parallelism), dict(options.spark_conf))
    try:
        return run_copy_spark(
            spark,
            tasks,
            parallelism=options.parallelism,
            fsync=options.fsync,
            bytes_per_second=options.max_bytes_per_second,
        )
    finally:
        spark.stop()
