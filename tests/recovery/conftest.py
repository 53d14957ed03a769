"""Fixtures of the recovery tests: a real topic tiered to file:// and moto s3://, then deleted."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from storage_core.adapters.store import RemoteStore
from storage_core.remote.reader import RemoteReader

from .history import PARTITIONS, Rec, consume, delete_topic, produce_history, run_cli


@dataclass
class Remote:
    url: str
    options: dict[str, Any]
    flags: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def reader(self) -> RemoteReader:
        return RemoteReader(RemoteStore(self.url, self.options))


@dataclass
class Deleted:
    """A topic that was produced, tiered to two remote tiers, read back by a real consumer, then deleted."""

    bootstrap: str
    topic: str
    topic_id: str
    file: Remote
    s3: Remote
    expected: dict[int, list[Rec]]
    """Per partition: what a read_committed consumer returned, up to the last tiered offset."""
    tiered_end: dict[int, int]


@pytest.fixture(scope="module")
def deleted_topic(
    kafka_broker: KafkaCluster, moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deleted]:
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"recover-{uuid.uuid4().hex[:8]}"
    produce_history(bootstrap, topic)
    file_dir: Path = tmp_path_factory.mktemp("remote")
    file = Remote(f"file://{file_dir}", {}, ["--remote", f"file://{file_dir}"])
    import s3fs

    options = moto_server.storage_options()
    bucket = f"recover-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(**options).mkdir(bucket)
    s3 = Remote(
        f"s3://{bucket}/tier",
        options,
        ["--remote", f"s3://{bucket}/tier", "--endpoint-url", moto_server.endpoint_url, "--path-style"],
        {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]},
    )
    for remote in (file, s3):
        proc = run_cli(
            "copy",
            "--log-dir",
            str(kafka_broker.log_dir(1)),
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            topic,
            *remote.flags,
            env=remote.env,
        )
        assert proc.returncode == 0, proc.stderr
    with file.reader() as reader:
        tps = [reader.resolve(topic, p) for p in range(PARTITIONS)]
        tiered_end = {tp.partition: reader.manifest(tp).end_offset for tp in tps}
    topic_id = tps[0].topic_id
    assert all(end is not None and end > 1000 for end in tiered_end.values()), tiered_end
    expected = {
        p: [r for r in consume(bootstrap, topic, p) if r.offset <= end]
        for p, end in tiered_end.items()
        if end is not None
    }
    delete_topic(bootstrap, topic)
    try:
        yield Deleted(
            bootstrap,
            topic,
            topic_id,
            file,
            s3,
            expected,
            {p: e for p, e in tiered_end.items() if e is not None},
        )
    finally:
        delete_topic(bootstrap, topic)
