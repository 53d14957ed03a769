"""Crash trials: SIGKILL at named points of copy, cleanup, rebuild and recover, on file:// and s3:// (moto),
then a rerun, then the invariants (tests/crash/invariants.py).

Each lifecycle runs on a fresh topic of the session broker and a fresh remote tier: copy, produce more and
copy again, rebuild a log dir, cleanup (remote retention by bytes and a full local trim), delete the topic
and recover it. Every step is one trial: the command runs with ``TIERKEEPER_FAULT=<point>:<n>`` (a point
of storage_core.faults picked by a seeded RNG among the verb's own points and ``store.request``, the n-th
remote-store operation of any verb), must die by SIGKILL there, and is rerun to completion. The kill
lands where the hook is, so no trial depends on the machine's speed.

``TIERKEEPER_CRASH_TRIALS``: ``reduced`` (default, CI: 1 lifecycle per store = 10 trials), ``full``
(10 lifecycles per store = 100 trials) or a number of lifecycles. ``TIERKEEPER_CRASH_REPORT=<file>``
appends one JSON line per trial.
"""

from __future__ import annotations

import json
import os
import random
import signal
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.store import RemoteStore

from .invariants import Snapshot, check, complete_segments, snapshot

PARTITIONS = 2
RECORDS_PER_ROUND = 1500
MODE = os.environ.get("TIERKEEPER_CRASH_TRIALS", "reduced")
LIFECYCLES = {"reduced": 1, "full": 10}.get(MODE) or int(MODE)

# Kill points per step, with the largest pass count that is always reached by that step on this data
# (2 partitions of 4+ rolled segments each; retention deletes 2+ segments per partition).
POINTS: dict[str, dict[str, int]] = {
    "copy": {
        "copy.segment.started": 6,
        "copy.log.stored": 6,
        "copy.segment.finished": 6,
        "store.request": 40,
    },
    "cleanup": {
        "cleanup.delete.started": 2,
        "cleanup.segment.data_deleted": 3,
        "cleanup.segment.deleted": 3,
        "cleanup.trim.recorded": 2,
        "store.request": 20,
    },
    "rebuild": {
        "rebuild.chunk.written": 20,
        "rebuild.file.restored": 20,
        "rebuild.installing": 1,
        "store.request": 20,
    },
    # recover runs with --transaction-records 200: after retention, 4+ transactions per partition.
    "recover": {"recover.chunk.produced": 4, "recover.chunk.committed": 4, "store.request": 10},
}


@dataclass
class Trial:
    store: str
    lifecycle: int
    step: str
    fault: str
    killed: bool
    records_verified: int


@dataclass
class Target:
    kind: str
    url: str
    options: dict[str, Any]
    flags: list[str]
    env: dict[str, str]

    def store(self) -> RemoteStore:
        return RemoteStore(self.url, self.options)


def _target(kind: str, tmp: Path, moto: MotoServer) -> Target:
    if kind == "file":
        url = f"file://{tmp / 'remote'}"
        return Target(kind, url, {}, ["--remote", url], {})
    import s3fs

    options = moto.storage_options()
    bucket = f"crash-{uuid.uuid4().hex[:10]}"
    s3fs.S3FileSystem(**options).mkdir(bucket)
    url = f"s3://{bucket}/tier"
    flags = ["--remote", url, "--endpoint-url", moto.endpoint_url, "--path-style"]
    return Target(
        kind,
        url,
        options,
        flags,
        {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]},
    )


def _produce(bootstrap: str, topic: str, rng: random.Random) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
    for p in range(PARTITIONS):
        for i in range(RECORDS_PER_ROUND):
            producer.produce(
                topic, key=f"k{i}".encode(), value=rng.randbytes(rng.randint(40, 200)), partition=p
            )
            if i % 500 == 0:
                producer.poll(0)
    assert producer.flush(60) == 0


def _create_topic(kafka: KafkaCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    config = {"internal.segment.bytes": "65536", "retention.ms": "-1"}
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)])[topic].result(60)
    kafka.wait_topic(topic, PARTITIONS)


def _delete_topic(kafka: KafkaCluster, topic: str) -> None:
    from storage_core.adapters.kafka_admin import KafkaAdmin

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.delete_topics([topic])[topic].result(60)
    # Wait until the name is free again (recover refuses a topic that still exists with data).
    import time

    deadline = time.monotonic() + 60
    while KafkaAdmin(kafka.bootstrap_servers).describe_if_exists(topic):
        assert time.monotonic() < deadline, f"topic {topic} still exists 60 s after its deletion"
        time.sleep(0.2)


def _consume(
    bootstrap: str, topic: str, partition: int, until: int
) -> list[tuple[bytes | None, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"crash-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    out: list[tuple[bytes | None, bytes | None]] = []
    try:
        while len(out) < until:
            msg = consumer.poll(30)
            assert msg is not None, f"{topic}-{partition}: consumer stalled at {len(out)} of {until}"
            assert not msg.error(), msg.error()
            out.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


REBUILD_MARKER = "tierkeeper-rebuild.json"


def _tree(path: Path) -> dict[str, bytes]:
    """Every file of a rebuilt dir but the rebuild's own marker (which records when it ran)."""
    files = {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}
    assert json.loads(files.pop(REBUILD_MARKER))["phase"] == "complete"
    return files


def _meta_properties(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "meta.properties").write_text(
        "node.id=1\ndirectory.id=Xm2tXo9jS0aXq3vJ9uC7BQ\nversion=1\ncluster.id=7x2hHk5DTlqdNf6mPq0Ang\n"
    )


class Lifecycle:
    """One topic's life against one remote tier, each step a crash trial."""

    def __init__(
        self, kafka: KafkaCluster, target: Target, tmp: Path, rng: random.Random, number: int
    ) -> None:
        self.kafka = kafka
        self.bootstrap = kafka.bootstrap_servers
        self.target = target
        self.tmp = tmp
        self.rng = rng
        self.number = number
        self.topic = f"crash-{uuid.uuid4().hex[:8]}"
        self.trials: list[Trial] = []

    def _fault(self, step: str) -> str:
        point, most = self.rng.choice(sorted(POINTS[step].items()))
        return f"{point}:{self.rng.randint(1, most)}"

    def _killed_then_rerun(self, step: str, args: list[str]) -> str:
        fault = self._fault(step)
        env = {**self.target.env, "TIERKEEPER_FAULT": fault}
        crashed = run_cli(*args, env=env)
        assert crashed.returncode == -signal.SIGKILL, (
            f"{step} with TIERKEEPER_FAULT={fault} was not killed there "
            f"(exit {crashed.returncode}): {crashed.stderr}"
        )
        rerun = run_cli(*args, env=self.target.env)
        assert rerun.returncode == 0, f"rerun of {step} after {fault}: {rerun.stderr}"
        return fault

    def _snapshot(self, with_kafka: bool = True) -> Snapshot:
        return snapshot(self.target.store(), self.bootstrap if with_kafka else None, self.topic, PARTITIONS)

    def _record(self, step: str, fault: str, verified: int) -> None:
        self.trials.append(Trial(self.target.kind, self.number, step, fault, True, verified))

    def copy_step(self, step: str) -> None:
        before = self._snapshot()
        args = ["copy", "--log-dir", str(self.kafka.log_dir(1)), "--bootstrap-servers", self.bootstrap]
        fault = self._killed_then_rerun("copy", [*args, "--topic", self.topic, *self.target.flags])
        after = self._snapshot()
        assert complete_segments(self.target.store(), self.topic) > 0
        assert all(after.remote[p] for p in range(PARTITIONS)), "the rerun tiers every partition"
        self._record(step, fault, check(before, after, may_expire=False) + after.records())

    def cleanup_step(self) -> None:
        before = self._snapshot()
        tiered = sum(len(v) for v in before.remote.values())
        args = [
            "cleanup",
            "--bootstrap-servers",
            self.bootstrap,
            "--topic",
            self.topic,
            "--remote-retention-bytes",
            "150000",
            "--local-retention-bytes",
            "0",
            "--orphan-grace-ms",
            "0",
            *self.target.flags,
        ]
        fault = self._killed_then_rerun("cleanup", args)
        after = self._snapshot()
        complete_segments(self.target.store(), self.topic)
        assert after.records() < tiered, "retention expired the oldest segments"
        self._record("cleanup", fault, check(before, after, may_expire=True) + after.records())

    def rebuild_step(self) -> None:
        before = self._snapshot()
        args = [
            "rebuild",
            "--bootstrap-servers",
            self.bootstrap,
            "--broker-id",
            "1",
            "--json",
            *self.target.flags,
        ]
        reference, trial = self.tmp / f"rebuilt-ref-{self.number}", self.tmp / f"rebuilt-{self.number}"
        _meta_properties(reference)
        _meta_properties(trial)
        plain = run_cli(*args, "--log-dir", str(reference), env=self.target.env)
        assert plain.returncode == 0, plain.stderr
        fault = self._killed_then_rerun("rebuild", [*args, "--log-dir", str(trial)])
        assert _tree(trial) == _tree(reference), "a killed and rerun rebuild restores what a clean one does"
        restored = [n for n in _tree(trial) if n.startswith(f"{self.topic}-") and n.endswith(".log")]
        assert restored, "the rebuild restored the tiered segments"
        after = self._snapshot()
        self._record("rebuild", fault, check(before, after, may_expire=False))

    def recover_step(self) -> None:
        before = self._snapshot(with_kafka=False)
        _delete_topic(self.kafka, self.topic)
        args = [
            "recover",
            "--topic",
            self.topic,
            "--bootstrap-servers",
            self.bootstrap,
            "--replication-factor",
            "1",
            "--transaction-records",
            "200",
        ]
        fault = self._killed_then_rerun("recover", [*args, "--json", *self.target.flags])
        verified = 0
        for p in range(PARTITIONS):
            want = [before.remote[p][o] for o in sorted(before.remote[p])]
            got = _consume(self.bootstrap, self.topic, p, len(want))
            assert got == want, f"partition {p}: the recovered topic differs from the tiered history"
            verified += len(want)
        self._record("recover", fault, verified)

    def run(self) -> list[Trial]:
        _create_topic(self.kafka, self.topic)
        try:
            _produce(self.bootstrap, self.topic, self.rng)
            self.copy_step("copy")
            _produce(self.bootstrap, self.topic, self.rng)
            self.copy_step("copy-more")
            # Rebuild before cleanup: a rebuild restores only segments above the leader's log start, and
            # cleanup's full local trim moves that start to the end of the tier.
            self.rebuild_step()
            self.cleanup_step()
            self.recover_step()
        finally:
            try:
                _delete_topic(self.kafka, self.topic)
            except Exception:  # noqa: BLE001 - already deleted by a failed recover step; the failure is reported
                pass
        return self.trials


@pytest.fixture
def report() -> Iterator[list[Trial]]:
    trials: list[Trial] = []
    yield trials
    path = os.environ.get("TIERKEEPER_CRASH_REPORT")
    if path:
        with open(path, "a") as out:
            for trial in trials:
                out.write(json.dumps(asdict(trial)) + "\n")


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_crash_trials_keep_every_invariant(
    kind: str, kafka_broker: KafkaCluster, moto_server: MotoServer, tmp_path: Path, report: list[Trial]
) -> None:
    rng = random.Random(f"crash-{kind}")
    for number in range(LIFECYCLES):
        target = _target(kind, tmp_path / f"life-{number}", moto_server)
        report.extend(Lifecycle(kafka_broker, target, tmp_path, rng, number).run())
    assert len(report) == 5 * LIFECYCLES and all(t.killed for t in report)
    print(
        f"{kind}: {len(report)} trials, points {sorted({t.fault.split(':')[0] for t in report})}, "
        f"{sum(t.records_verified for t in report)} records verified, 0 lost"
    )
