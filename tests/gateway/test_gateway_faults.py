"""Faults under the gateway: S3 errors on the remote reads, the gateway killed mid-read and restarted, a
leader change and a broker restart while a consumer reads the history. Every case ends with every record
read exactly once (after the commit point, for the group that resumes)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from harness.gateway import GatewayProcess, tier_and_trim
from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from harness.s3_faults import FaultPlan, FaultProxy, proxied_cli_flags

from .conftest import PARTITIONS, Record, Tiered, create_topic, produce, read_all
from .rawkafka import FETCH, FETCH_VERSION, RawClient, fetch_frame, leaders

KAFKA_STORAGE_ERROR = 56


def _poll_records(consumer: Consumer, count: int, got: list[Record]) -> None:
    want = len(got) + count
    while len(got) < want:
        msg = consumer.poll(30)
        assert msg is not None, f"stalled after {len(got)} records"
        assert not msg.error(), msg.error()
        got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))


# ---- S3 faults on the remote reads --------------------------------------------------------------------
def test_s3_errors_on_remote_reads_are_a_retriable_error_then_the_data(
    tiered: Tiered, moto_server: MotoServer, s3_fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    import s3fs

    bucket = f"gw-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(**moto_server.storage_options()).mkdir(bucket)
    url = f"s3://{bucket}/tier"
    options = moto_server.storage_options()
    env = {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]}
    topic = f"s3-{uuid.uuid4().hex[:6]}"
    create_topic(tiered.cluster, topic, 1)
    produce(tiered.cluster, topic, 1500, 1)
    expected = read_all(tiered.cluster.bootstrap_servers, topic, 1)
    config = json.dumps({"s3": {"addressing_style": "path"}})
    tier_and_trim(
        tiered.cluster,
        [
            "--remote",
            url,
            "--endpoint-url",
            moto_server.endpoint_url,
            "--storage-option",
            f"config_kwargs={config}",
        ],
        topic,
        env=env,
    )
    gateway = GatewayProcess(
        tiered.cluster.bootstrap_servers,
        url,
        tmp_path / "gateway",
        extra=proxied_cli_flags(url, s3_fault_proxy)[2:],
        env=env,
    ).start()
    try:
        # Every GET fails until 12 have failed: more than the gateway's retries of one read (3 attempts).
        s3_fault_proxy.set_plan(
            FaultPlan(
                rates={"error_500": 1.0}, methods=frozenset({"GET"}), max_in_a_row=100, caps={"error_500": 12}
            )
        )
        probe = RawClient.at(gateway.bootstrap)
        probe.handshake()
        partition_leaders, addresses = leaders(probe, topic)
        probe.close()
        c = RawClient.at(addresses[partition_leaders[0]])
        c.handshake()
        answers = []
        for i in range(20):  # each answer comes after the gateway's bounded retries: no sleep needed
            (part,) = c.call(FETCH, FETCH_VERSION, fetch_frame(topic, {0: 0}, 50 + i)).responses[0].partitions
            answers.append(part.error_code)
            if part.error_code == 0:
                assert part.records
                break
            assert not part.records
        c.close()
        assert answers[0] == KAFKA_STORAGE_ERROR, answers
        assert answers[-1] == 0, f"the data never came after the faults: {answers}"
        assert set(answers[:-1]) == {KAFKA_STORAGE_ERROR}
        assert s3_fault_proxy.injected["error_500"] == 12
        # A real client, with the faults back: it retries the storage error, skips nothing.
        s3_fault_proxy.set_plan(
            FaultPlan(
                rates={"error_500": 0.3},
                methods=frozenset({"GET"}),
                max_in_a_row=5,
                seed=27,
                caps={"error_500": 40},
            )
        )
        assert read_all(gateway.bootstrap, topic, 1, **{"fetch.error.backoff.ms": "50"}) == expected
    finally:
        s3_fault_proxy.set_plan(FaultPlan())
        gateway.stop()


# ---- the gateway killed mid-read -------------------------------------------------------------------------
def test_a_gateway_killed_mid_read_and_restarted_the_group_resumes_from_its_commit(
    tiered: Tiered, tmp_path: Path
) -> None:
    gateway = GatewayProcess(tiered.cluster.bootstrap_servers, tiered.remote, tmp_path / "gateway").start()
    group = f"resume-{uuid.uuid4().hex[:8]}"
    settings = {
        "bootstrap.servers": gateway.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "max.partition.fetch.bytes": 4096,
        # The first consumer's LeaveGroup may die with the killed gateway; the group then waits for its
        # session to expire before the second one gets the partitions: 6 s (the broker's minimum), not 45.
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
    }
    try:
        first = Consumer(settings)
        first.subscribe([tiered.topic])
        before: list[Record] = []
        _poll_records(first, 900, before)
        first.commit(asynchronous=False)
        committed = {  # a partition not read yet has no commit (-1001): the group starts it at 0
            tp.partition: max(tp.offset, 0)
            for tp in first.committed(
                [TopicPartition(tiered.topic, p) for p in range(PARTITIONS)], timeout=30
            )
        }
        _poll_records(first, 200, before)  # read on past the commit: these are not committed
        gateway.kill()  # SIGKILL while the consumer's fetches are in flight
        gateway.start()  # same ports: clients reconnect to the addresses they know
        first.close()
        second = Consumer(settings)
        second.subscribe([tiered.topic])
        after: list[Record] = []
        tail = [r for r in tiered.expected if r[1] >= committed.get(r[0], 0)]
        _poll_records(second, len(tail), after)
        second.close()
    finally:
        gateway.stop()
    assert len(committed) == PARTITIONS and sum(committed.values()) == 900
    assert sorted(after) == tail, "the group resumed from its commit, every later record once"
    assert len({(p, o) for p, o, _, _ in after}) == len(after)


# ---- leader change and broker restart under the gateway -------------------------------------------------
@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, Path]]:
    work = tmp_path_factory.mktemp("gateway-brokers")
    cluster = KafkaCluster(work / "kafka", brokers=3)
    cluster.start()
    try:
        yield cluster, work
    finally:
        cluster.stop()


def _leader(cluster: KafkaCluster, topic: str, partition: int) -> int:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(topic, timeout=30)
    return int(md.topics[topic].partitions[partition].leader)


def _wait(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.5)


def test_a_leader_change_and_a_broker_restart_while_a_consumer_reads_history(
    own_cluster: tuple[KafkaCluster, Path],
) -> None:
    cluster, work = own_cluster
    topic = "moving"
    create_topic(cluster, topic, 1, **{"min.insync.replicas": "1"})
    produce(cluster, topic, 2000, 1)
    expected = read_all(cluster.bootstrap_servers, topic, 1)
    remote = f"file://{work / 'tier'}"
    tier_and_trim(cluster, ["--remote", remote], topic)
    gateway = GatewayProcess(cluster.bootstrap_servers, remote, work / "gateway").start()
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": f"moving-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 2048,
            "fetch.max.bytes": 8192,
            "message.max.bytes": 4096,
            "queued.max.messages.kbytes": 16,
            "topic.metadata.refresh.interval.ms": 2000,
        }
    )
    got: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        _poll_records(consumer, 300, got)
        old = _leader(cluster, topic, 0)
        cluster.stop_broker(old)  # leader change: another replica leads
        _wait(lambda: _leader(cluster, topic, 0) not in (old, -1), "a new leader")
        _poll_records(consumer, 600, got)
        assert max(o for _, o, _, _ in got) < 2000
        cluster.start_broker(old)  # the broker comes back under the gateway
        _poll_records(consumer, len(expected) - len(got), got)
    finally:
        consumer.close()
        gateway.stop()
    assert sorted(got) == expected
    assert len({o for _, o, _, _ in got}) == len(expected), "an offset was delivered twice"
