"""Fixtures of the storage tests: a real dataset on the session broker and ways to run the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from harness.tierkeeper_cli import run_cli  # noqa: F401 - re-exported for the storage tests
from storage_core.adapters.store import RemoteStore
from storage_core.remote.reader import Isolation, ReadOptions, RemoteReader

from .dataset import Dataset, Expected, consume, produce_dataset


@dataclass
class Remote:
    """A remote tier target plus the CLI flags and environment that reach it."""

    url: str
    options: dict[str, Any]
    flags: list[str]
    env: dict[str, str]

    def store(self) -> RemoteStore:
        return RemoteStore(self.url, self.options)

    def reader(self, isolation: Isolation = Isolation.READ_COMMITTED) -> RemoteReader:
        return RemoteReader(self.store(), ReadOptions(isolation=isolation))


def copy_args(log_dir: Path, remote: str, *flags: str) -> list[str]:
    """The ``tierkeeper copy --assume-tierable`` arguments from ``log_dir`` into the tier at ``remote``."""
    return ["copy", "--assume-tierable", "--log-dir", str(log_dir), "--remote", remote, *flags]


def file_remote(path: Path) -> Remote:
    url = f"file://{path}"
    return Remote(url, {}, ["--remote", url], {})


def s3_remote(moto: MotoServer, bucket_url: str, options: dict[str, Any]) -> Remote:
    env = {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]}
    flags = ["--remote", bucket_url, "--endpoint-url", moto.endpoint_url, "--path-style"]
    return Remote(bucket_url, options, flags, env)


@pytest.fixture(scope="module")
def dataset(kafka_broker: KafkaCluster, request: pytest.FixtureRequest) -> Iterator[Dataset]:
    prefix = request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")
    data = produce_dataset(kafka_broker.bootstrap_servers, prefix)
    try:
        yield data
    finally:
        if data.open_txn_producer is not None:
            data.open_txn_producer.abort_transaction(30)


_EXPECTED: dict[tuple[str, str, int, str, int], list[Expected]] = {}


def expected_records(data: Dataset, topic: str, partition: int, isolation: str, until: int) -> list[Expected]:
    """What a real consumer reads up to offset ``until``, cached so each range is consumed once."""
    key = (data.bootstrap, topic, partition, isolation, until)
    if key not in _EXPECTED:
        _EXPECTED[key] = consume(data.bootstrap, topic, partition, isolation, until_offset=until)
    return _EXPECTED[key]
