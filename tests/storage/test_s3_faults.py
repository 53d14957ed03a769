"""copy, read, ls and cleanup against an S3 endpoint that fails: 500s, 503 SlowDown, stalls past the client's
read timeout, connection resets before and after the request is applied, and short reads.

Each command completes (its requests are retried) and leaves a tier that verifies against the broker's
own files and a real consumer; with more faults in a row than the retry bound, it fails with one line
naming the operation, the key and the attempts. The s3_fault_proxy counts what it injected; with
``TIERKEEPER_FAULT_REPORT=<file>`` the counts are appended there as JSON lines (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import random
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from harness.s3_faults import FaultPlan, FaultProxy, proxied_cli_flags, proxied_options, report
from storage_core.adapters import s3_upload
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore
from storage_core.retry import RetryPolicy

from .conftest import run_cli
from .dataset import consume
from .tier_checks import finished_segments_complete, open_uploads, read_offsets, rolled_segments

PARTITIONS = 2
RECORDS = 3000
EVERY_FAULT = {
    "error_500": 0.03,
    "slow_down": 0.03,
    "stall": 0.02,
    "reset": 0.03,
    "reset_after": 0.03,
    "short_read": 0.03,
}
# Stalls cost one client read timeout each; a cap keeps the run short on a slow machine.
PLAN = FaultPlan(rates=EVERY_FAULT, seed=19, max_in_a_row=2, caps={"stall": 6})


@pytest.fixture(scope="module")
def topic(kafka_broker: KafkaCluster) -> str:
    """Two partitions of small segments (a dozen each), plain records."""
    name = f"faults-{uuid.uuid4().hex[:8]}"
    bootstrap = kafka_broker.bootstrap_servers
    config = {"internal.segment.bytes": "65536", "retention.ms": "-1"}
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future is done
    admin.create_topics([NewTopic(name, PARTITIONS, 1, config=config)])[name].result(60)
    kafka_broker.wait_topic(name, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
    rng = random.Random(19)
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            producer.produce(
                name, key=f"k{i}".encode(), value=rng.randbytes(rng.randint(50, 300)), partition=p
            )
            if i % 500 == 0:
                producer.poll(0)
    assert producer.flush(60) == 0
    return name


def _bucket(moto_server: MotoServer) -> str:
    import s3fs

    name = f"faults-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(**moto_server.storage_options()).mkdir(name)
    return name


def test_copy_read_ls_and_cleanup_complete_under_faults_and_the_tier_verifies(
    kafka_broker: KafkaCluster, moto_server: MotoServer, s3_fault_proxy: FaultProxy, topic: str
) -> None:
    url = f"s3://{_bucket(moto_server)}/tier"
    options = moto_server.storage_options()
    env = {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]}
    flags = proxied_cli_flags(url, s3_fault_proxy)
    bootstrap = ["--bootstrap-servers", kafka_broker.bootstrap_servers]
    log_dir = kafka_broker.log_dir(1)
    clean = RemoteStore(url, options)  # straight to moto: the checks see no faults

    s3_fault_proxy.set_plan(PLAN)
    copied = run_cli("copy", "--log-dir", str(log_dir), *bootstrap, "--topic", topic, *flags, env=env)
    assert copied.returncode == 0, copied.stderr
    after_copy = s3_fault_proxy.total_injected()
    assert after_copy > 0, "the copy met no fault: the test tests nothing"

    finished = finished_segments_complete(clean, log_dir)
    ends = {}
    for p in range(PARTITIONS):
        rolled = rolled_segments(log_dir, topic, p)
        assert finished[(topic, p)] == rolled[: len(finished[(topic, p)])]
        assert len(finished[(topic, p)]) >= len(rolled) - 1, "every rolled segment below the LSO is tiered"
        offsets = read_offsets(clean, topic, p)
        assert offsets == list(range(len(offsets))) and offsets, "one gap-free run from offset 0"
        ends[p] = offsets[-1]

    for p in range(PARTITIONS):
        read = run_cli(
            "read",
            "--topic",
            topic,
            "--partition",
            str(p),
            "--from-offset",
            "0",
            *flags,
            env=env,
            timeout=600,
        )
        assert read.returncode == 0, read.stderr
        got = [json.loads(line) for line in read.stdout.splitlines()]
        want = consume(kafka_broker.bootstrap_servers, topic, p, "read_committed", until_offset=ends[p])
        assert [(r["offset"], r["key"]["utf8"]) for r in got] == [(w.offset, w.key.decode()) for w in want]
        assert [r["value"] for r in got] == [_as_json(w.value) for w in want]

    listed = run_cli("ls", "--topic", topic, "--json", *flags, env=env)
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout

    # Cleanup: remote retention by bytes deletes the oldest segments, local trim follows the tier.
    before = {p: finished[(topic, p)] for p in range(PARTITIONS)}
    half = sum(s.stat().st_size for s in (log_dir / f"{topic}-0").glob("*.log")) // 2
    cleaned = run_cli(
        "cleanup",
        *bootstrap,
        "--topic",
        topic,
        "--remote-retention-bytes",
        str(half),
        "--local-retention-bytes",
        "0",
        "--orphan-grace-ms",
        "0",
        "--json",
        *flags,
        env=env,
    )
    assert cleaned.returncode == 0, cleaned.stderr
    after = finished_segments_complete(clean, log_dir, after_trim=True)
    log_starts = KafkaAdmin(kafka_broker.bootstrap_servers).log_start_offsets(
        [(topic, p) for p in range(PARTITIONS)]
    )
    for p in range(PARTITIONS):
        kept = after[(topic, p)]
        assert kept and kept == before[p][len(before[p]) - len(kept) :], "retention deletes a prefix only"
        assert len(kept) < len(before[p]), "retention by bytes deleted something"
        offsets = read_offsets(clean, topic, p)
        assert offsets == list(range(kept[0], ends[p] + 1)), "what remains reads back without a gap"
        assert log_starts[(topic, p)] <= ends[p] + 1, "local trim never passes the tiered end"
        assert log_starts[(topic, p)] >= kept[0], "no gap between remote and local data"
    assert open_uploads(clean, clean.root) == [], "uploads opened by lost create answers are swept"
    report(
        "copy+read+ls+cleanup",
        s3_fault_proxy,
        segments=sum(len(v) for v in before.values()),
        records_verified=sum(ends[p] + 1 for p in range(PARTITIONS)),
    )


def _as_json(value: bytes | None) -> dict[str, str] | None:
    from storage_core.cli.read import _text

    return _text(value)


def test_multipart_upload_survives_lost_answers_and_failed_parts(
    moto_server: MotoServer, s3_fault_proxy: FaultProxy
) -> None:
    """Every create and completion is applied but its answer lost; parts fail or lose their answer too.
    The object is whole and exact; the upload a lost create opened is left for the sweep, which aborts it."""
    bucket = _bucket(moto_server)
    options = moto_server.storage_options()
    store = RemoteStore(
        f"s3://{bucket}/mp",
        proxied_options(options, s3_fault_proxy),
        retry=RetryPolicy(max_delay=0.2, seed=1),
    )
    data = os.urandom(3 * s3_upload.PART_SIZE + 12345)
    s3_fault_proxy.set_plan(
        FaultPlan(rates={"reset_after": 1.0}, methods=frozenset({"POST"}), max_in_a_row=1)
    )
    chunks = [data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20)]
    # The parts: PUTs with a query; faults on them come from a second plan after the create went through.
    assert store.put_chunks(f"{store.root}/object", chunks) == len(data)
    assert s3_fault_proxy.injected["reset_after"] == 2, "one lost create, one lost completion"
    clean = RemoteStore(f"s3://{bucket}/mp", options)
    assert clean.get(f"{clean.root}/object") == data
    leftovers = open_uploads(clean, clean.root)
    assert len(leftovers) == 1, "the upload whose create answer was lost is still open"
    assert store.abort_stale_uploads(clean.root, older_than_ms=1 << 62) == [f"{clean.root}/object"]
    assert open_uploads(clean, clean.root) == []

    s3_fault_proxy.set_plan(
        FaultPlan(
            rates={"error_500": 0.2, "reset_after": 0.2, "reset": 0.2},
            methods=frozenset({"PUT"}),
            max_in_a_row=3,
        )
    )
    assert store.put_chunks(f"{store.root}/object2", chunks) == len(data)
    assert s3_fault_proxy.injected["error_500"] + s3_fault_proxy.injected["reset"] > 0
    assert clean.get(f"{clean.root}/object2") == data
    report("multipart", s3_fault_proxy)


def test_more_faults_in_a_row_than_the_bound_fail_with_one_line_and_tier_nothing(
    kafka_broker: KafkaCluster,
    moto_server: MotoServer,
    s3_fault_proxy: FaultProxy,
    topic: str,
    tmp_path: Path,
) -> None:
    url = f"s3://{_bucket(moto_server)}/tier"
    options = moto_server.storage_options()
    env = {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]}
    # Every write is refused with SlowDown, forever; reads go through.
    s3_fault_proxy.set_plan(
        FaultPlan(rates={"slow_down": 1.0}, methods=frozenset({"PUT", "POST"}), max_in_a_row=1 << 30)
    )
    proc = run_cli(
        "copy",
        "--log-dir",
        str(kafka_broker.log_dir(1)),
        "--bootstrap-servers",
        kafka_broker.bootstrap_servers,
        "--topic",
        topic,
        "--retry-attempts",
        "3",
        *proxied_cli_flags(url, s3_fault_proxy),
        env=env,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("tierkeeper copy: error:")]
    assert errors, proc.stderr
    assert any("gave up after 3 attempts" in line and "SlowDown" in line for line in errors), proc.stderr
    assert any(f"/tier/{topic}-" in line for line in errors), "the error names the key: " + proc.stderr
    clean = RemoteStore(url, options)
    finished = finished_segments_complete(clean, kafka_broker.log_dir(1))
    assert all(bases == [] for bases in finished.values()), finished
    report("bound-exceeded", s3_fault_proxy)

    # A read bound: every GET refused.
    s3_fault_proxy.set_plan(
        FaultPlan(rates={"error_500": 1.0}, methods=frozenset({"GET"}), max_in_a_row=1 << 30)
    )
    listed = run_cli("ls", "--retry-attempts", "2", *proxied_cli_flags(url, s3_fault_proxy), env=env)
    assert listed.returncode == 1 and "Traceback" not in listed.stderr
    assert "gave up after 2 attempts" in listed.stderr and "InternalError" in listed.stderr, listed.stderr
