"""Fixtures of the Spark tests: the storage tests' real dataset (every codec, headers, nulls, committed
and aborted transactions) produced once on the session broker, tiered by the real CLI to file:// and to
moto s3://, and the session's SparkSession with the tierkeeper source registered."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from storage.dataset import Dataset, Expected, consume, produce_dataset

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.store import RemoteStore
from storage_core.remote.reader import RemoteReader

SECRET = "tk-spark-secret-7Qv2"
"""The S3 secret the DataFrame options carry (moto accepts any): it must never show in a plan or error."""


@dataclass
class Tier:
    """A tiered copy of the dataset and the DataFrame options that reach it."""

    url: str
    storage_options: dict[str, Any]
    df_options: dict[str, str]
    cli_flags: list[str]
    env: dict[str, str]

    def store(self) -> RemoteStore:
        return RemoteStore(self.url, self.storage_options)

    def fs(self) -> Any:
        """The tier's fsspec filesystem (for tests that look at or plant objects directly)."""
        return self.store().fs

    def remote_end(self, topic: str, partition: int) -> int:
        """The last tiered offset of a partition."""
        with RemoteReader(self.store()) as reader:
            end = reader.manifest(reader.resolve(topic, partition), refresh=True).end_offset
        assert end is not None, f"{topic}-{partition}: nothing tiered"
        return end


@pytest.fixture(scope="session")
def spark_dataset(kafka_broker: KafkaCluster) -> Iterator[Dataset]:
    data = produce_dataset(kafka_broker.bootstrap_servers, "spark")
    try:
        yield data
    finally:
        if data.open_txn_producer is not None:
            data.open_txn_producer.abort_transaction(30)


def copy_to(tier: Tier, data: Dataset, broker: KafkaCluster, topics: list[str] | None = None) -> None:
    topic_flags = [arg for t in (topics or list(data.partitions)) for arg in ("--topic", t)]
    proc = run_cli(
        "copy",
        "--log-dir",
        str(broker.log_dir(1)),
        "--bootstrap-servers",
        data.bootstrap,
        "--json",
        *topic_flags,
        *tier.cli_flags,
        env=tier.env,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["failed_partitions"] == 0


@pytest.fixture(scope="session")
def file_tier(
    spark_dataset: Dataset, kafka_broker: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Tier:
    path: Path = tmp_path_factory.mktemp("spark-remote")
    url = f"file://{path}"
    tier = Tier(url, {}, {"remote": url}, ["--remote", url], {})
    copy_to(tier, spark_dataset, kafka_broker)
    return tier


@pytest.fixture(scope="session")
def s3_tier(spark_dataset: Dataset, kafka_broker: KafkaCluster, moto_server: MotoServer) -> Tier:
    import s3fs

    options = {**moto_server.storage_options(), "secret": SECRET}
    s3fs.S3FileSystem(**options).mkdir("spark-tier")
    url = "s3://spark-tier/history"
    df_options = {
        "remote": url,
        "endpointUrl": moto_server.endpoint_url,
        "pathStyle": "true",
        "storage.key": options["key"],
        "storage.secret": SECRET,
        "storage.use_listings_cache": "false",
    }
    env = {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": SECRET}
    flags = ["--remote", url, "--endpoint-url", moto_server.endpoint_url, "--path-style"]
    # In-process reads list after the CLI's child processes wrote: no listings cached by s3fs.
    tier = Tier(url, {**options, "use_listings_cache": False}, df_options, flags, env)
    copy_to(tier, spark_dataset, kafka_broker, [spark_dataset.txn_topic, spark_dataset.codec_topics[1]])
    return tier


@pytest.fixture(scope="session")
def tk_spark(spark: Any) -> Any:
    """The session's SparkSession with pushdown enabled and the pushdown source registered."""
    from storage_core.spark import TierkeeperPushdownDataSource, register

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    assert register(spark) is TierkeeperPushdownDataSource
    return spark


_EXPECTED: dict[tuple[str, int, str, int], list[Expected]] = {}


def expected(data: Dataset, topic: str, partition: int, isolation: str, until: int) -> list[Expected]:
    """What a real consumer reads up to offset ``until`` (inclusive), consumed once per range."""
    key = (topic, partition, isolation, until)
    if key not in _EXPECTED:
        _EXPECTED[key] = consume(data.bootstrap, topic, partition, isolation, until_offset=until)
    return _EXPECTED[key]


CONNECT_BACK = ("Python worker failed to connect back", "Timed out while waiting for the Python worker")
"""How the query's error says it (the message, then its cause's). Spark 4.1 waits a fixed 10 s
(PythonWorkerFactory.createSimpleWorker; no setting) for a streaming Python source's runner process to
start, import pyspark and connect back; on 2 cores shared by several sessions that can take longer."""


class StreamRun:
    """A streaming query, started again when it failed only because Spark gave up waiting for its
    source's Python runner to connect back (CONNECT_BACK). Spark starts that runner once per run, before
    the source's first call, so the failed run planned nothing; a query with a checkpoint resumes from
    it, which the stream must survive anyway. Any other failure is raised as is."""

    def __init__(self, start: Callable[[], Any], attempts: int = 6) -> None:
        self._start = start
        self._attempts = attempts
        self.query = start()

    def _retrying(self, wait: Callable[[Any], Any]) -> Any:
        from pyspark.errors import StreamingQueryException

        for attempt in range(self._attempts):
            try:
                return wait(self.query)
            except StreamingQueryException as exc:
                if not any(m in str(exc) for m in CONNECT_BACK) or attempt == self._attempts - 1:
                    raise
                self.query.stop()
                self.query = self._start()
        raise AssertionError("unreachable")

    def process_all_available(self) -> None:
        self._retrying(lambda q: q.processAllAvailable())

    def await_termination(self) -> None:
        """Until the query ends (Trigger.AvailableNow); raises what it failed with."""
        self._retrying(lambda q: q.awaitTermination())

    def stop(self) -> None:
        self.query.stop()
