"""Two gateway replicas behind one address (issue 45, item 2): a rolling restart and a SIGKILLed replica
while consumer groups read history from the tier and acks=all idempotent producers write, with
librdkafka and Kafka's Java clients.

The replicas are two ``tierkeeper gateway`` processes on the same ports, each on a loopback address of
its own (127.0.0.2, 127.0.0.3), both advertising 127.0.0.1, where harness.balancer's :class:`Balancer`
stands in for the Kubernetes Service (round robin of new connections; a replica being restarted is taken
out first, as a terminating pod leaves the Service's endpoints; a SIGKILLed one stays in and refuses).

Every fault happens at a barrier: each consumer stops taking records once it has read the fault's number
of records and waits until the fault is done (the librdkafka ones in their thread; the Java one because
the test stops reading its output, and it blocks on a full pipe), so every fault lands mid-read whatever
the machine's speed. The producers never wait: their requests are in flight through every fault. While the
killed replica still refuses, each librdkafka group's consumer is replaced by a new member, which resumes
from the commits made through replicas since restarted or killed.

Afterwards, tests/gateway/delivery_log.py's rule for each group (every record once by (partition,
offset); a re-read only from the group's commit; read to the end and committed), every acknowledged
record of both producers in Kafka once at the offset it was acknowledged at, and no client error that is
not a connection's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from harness.balancer import Balancer
from harness.gateway import GatewayProcess, free_port_block, tier_and_trim
from harness.kafka import KafkaCluster

from .conftest import Tiered, create_topic, produce, read_all
from .delivery_log import Committed, Delivered, GroupLog, problems, verifiable_consumer_event
from .rawkafka import FETCH, FETCH_VERSION, RawClient, fetch_frame, leaders
from .sightings import poll_until

HISTORY_RECORDS = 12000
PARTITIONS = 3
BARRIERS = (1500, 3000, 4500, 6000)
"""Records each group has read when: replica a restarts, replica b restarts, replica a is SIGKILLed, the
killed one is restarted. Past the last one at least a pipe's worth of the Java consumer's output is left
(it may run that far ahead of the barrier), so every fault lands mid-read."""
REPLACED_AT = (BARRIERS[2] + BARRIERS[3]) // 2
"""Records each librdkafka group has read when its consumer is replaced by a new member: while the killed
replica still refuses."""
DEADLINE_S = 600.0
FETCH_SESSION_ID_NOT_FOUND = 70
CONNECTION_ERRORS = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})
"""What a client may see of a replica going away, besides errors Kafka marks retriable."""


def _until(condition: Callable[[], bool], what: str) -> None:
    poll_until(condition, what, step=lambda: time.sleep(0.05), timeout_s=DEADLINE_S)


@dataclass
class Barriers:
    """One event per barrier: set once the fault at it is done."""

    thresholds: tuple[int, ...] = BARRIERS
    done: list[threading.Event] = field(default_factory=lambda: [threading.Event() for _ in BARRIERS])

    def hold(self, count: int) -> None:
        """Wait for every fault whose threshold ``count`` has reached."""
        for threshold, event in zip(self.thresholds, self.done):
            if count >= threshold and not event.wait(DEADLINE_S):
                raise TimeoutError(f"the fault at {threshold} records never finished")


class LibrdkafkaGroup(threading.Thread):
    """A librdkafka consumer group reading ``topic`` from the earliest offset (the tier's start) to
    ``ends``, committing synchronously after every batch; at REPLACED_AT records its consumer closes and a
    new member takes over, resuming from the group's commits (made through replicas since restarted or
    killed)."""

    def __init__(
        self, bootstrap: str, topic: str, ends: dict[int, int], barriers: Barriers, **config: str
    ) -> None:
        super().__init__(daemon=True, name=f"group-{config.get('group.protocol', 'classic')}")
        self.topic, self.ends, self.barriers = topic, ends, barriers
        self.group = f"replicas-{uuid.uuid4().hex[:8]}"
        self.errors: list[KafkaError] = []
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": self.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 16384,
            "queued.max.messages.kbytes": 256,
            "reconnect.backoff.max.ms": 1000,
            "error_cb": self.errors.append,
            **config,
        }
        self.log = GroupLog()
        self.failure: BaseException | None = None

    @property
    def count(self) -> int:
        return self.log.delivered

    def run(self) -> None:
        try:
            self._read()
        except BaseException as exc:  # noqa: BLE001 - reported by the test's assertions
            self.failure = exc

    def _read(self) -> None:
        consumer = Consumer(self.config)
        position = dict.fromkeys(self.ends, 0)
        deadline = time.monotonic() + DEADLINE_S
        try:
            consumer.subscribe([self.topic])
            replaced = False
            while any(position[p] < end for p, end in self.ends.items()) or not self._committed_ends():
                assert time.monotonic() < deadline, f"{self.group}: not done within {DEADLINE_S} s"
                self.barriers.hold(self.count)
                if not replaced and self.count >= REPLACED_AT:
                    consumer.close()
                    consumer = Consumer(self.config)
                    consumer.subscribe([self.topic])
                    replaced = True
                batch: dict[int, int] = {}
                for msg in consumer.consume(num_messages=100, timeout=0.5):
                    if msg.error():
                        self.errors.append(msg.error())
                        continue
                    self.log.events.append(Delivered(msg.partition(), msg.offset()))
                    position[msg.partition()] = batch[msg.partition()] = msg.offset() + 1
                if batch:
                    self._commit(consumer, batch)
                elif all(position[p] >= end for p, end in self.ends.items()):
                    # Read to the end, the ends not committed yet (the last batch's commit failed). Only
                    # then the position is committed without a batch: after a rebalance the consumer
                    # re-reads from the group's commit, and committing the old position meanwhile would
                    # claim what it has not re-read.
                    self._commit(consumer, dict(position))
        finally:
            consumer.close()

    def _committed_ends(self) -> bool:
        last: dict[int, Committed] = {}
        for event in self.log.events:
            if isinstance(event, Committed):
                last[event.partition] = event
        return all(p in last and last[p].success and last[p].offset == e for p, e in self.ends.items())

    def _commit(self, consumer: Consumer, offsets: dict[int, int]) -> None:
        if not offsets:
            return
        try:
            result = consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False
            )
        except KafkaException as exc:
            self.errors.append(exc.args[0])
            self.log.events.extend(Committed(p, o, False) for p, o in offsets.items())
            return
        for tp in result or []:
            if tp.error is not None:
                self.errors.append(tp.error)
            self.log.events.append(Committed(tp.partition, tp.offset, tp.error is None))


class JavaTool(threading.Thread):
    """One of Kafka's Java tools (``main_class``) as a child process, with ``properties`` as its client
    configuration file; a thread reads its output (:meth:`line`); stderr (warnings and errors, harness.kafka's
    tools logging) goes to a file."""

    def __init__(
        self,
        cluster: KafkaCluster,
        main_class: str,
        args: list[str],
        config_flag: str,
        properties: dict[str, str],
        workdir: Path,
        name: str,
    ) -> None:
        super().__init__(daemon=True, name=name)
        config = workdir / f"{name}.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        self.stderr = open(workdir / f"{name}.err", "w")
        self.proc = subprocess.Popen(
            cluster.tool_command(main_class, *args, config_flag, str(config)),
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.line(line)

    def line(self, line: str) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM: the tool closes its client (a producer flushes first) and reports; its exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.join(60)
            self.stderr.close()

    def stderr_lines(self) -> list[str]:
        return Path(self.stderr.name).read_text().splitlines()


class JavaGroup(JavaTool):
    """Kafka's VerifiableConsumer (its Java consumer, synchronous commits after every poll) reading the
    topic; the thread reads its output and holds it at the barriers (the consumer then blocks on the
    full pipe)."""

    def __init__(
        self, cluster: KafkaCluster, bootstrap: str, topic: str, barriers: Barriers, workdir: Path
    ) -> None:
        self.topic, self.barriers = topic, barriers
        self.group = f"replicas-java-{uuid.uuid4().hex[:8]}"
        self.log = GroupLog()
        self.commit_errors: list[str] = []
        super().__init__(
            cluster,
            "org.apache.kafka.tools.VerifiableConsumer",
            ["--bootstrap-server", bootstrap, "--topic", topic, "--group-id", self.group]
            + ["--reset-policy", "earliest", "--verbose"],
            "--consumer.config",
            {"max.partition.fetch.bytes": "16384", "reconnect.backoff.max.ms": "1000"},
            workdir,
            "java-consumer",
        )

    @property
    def count(self) -> int:
        return self.log.delivered

    def line(self, line: str) -> None:
        self.barriers.hold(self.count)
        self.log.events.extend(verifiable_consumer_event(line, self.topic))
        if '"offsets_committed"' in line and '"success":false' in line:
            self.commit_errors.append(json.loads(line).get("error", ""))


class LibrdkafkaProducer(threading.Thread):
    """An idempotent acks=all producer writing one record every ``interval_s`` until stopped."""

    def __init__(self, bootstrap: str, topic: str, interval_s: float = 0.005) -> None:
        super().__init__(daemon=True, name="producer")
        self.topic, self.interval_s = topic, interval_s
        self.errors: list[KafkaError] = []
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: list[tuple[bytes, KafkaError]] = []
        self.sent = 0
        self._stopping = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "reconnect.backoff.max.ms": 1000,
                "error_cb": self.errors.append,
            }
        )

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.failed.append((msg.value(), err))
        else:
            self.acked[msg.value()] = (msg.partition(), msg.offset())

    def run(self) -> None:
        while not self._stopping.is_set():
            self.producer.produce(self.topic, value=f"py-{self.sent}".encode(), on_delivery=self._delivered)
            self.sent += 1
            self.producer.poll(self.interval_s)

    def stop(self) -> int:
        self._stopping.set()
        self.join(60)
        return self.producer.flush(120)


class JavaProducer(JavaTool):
    """Kafka's VerifiableProducer (acks=all, idempotent) at a fixed rate until SIGTERM (it then flushes
    and reports every send). Its retries default to 0, which idempotence refuses: set as the Java client's
    own default."""

    def __init__(self, cluster: KafkaCluster, bootstrap: str, topic: str, workdir: Path) -> None:
        self.topic = topic
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: list[str] = []
        super().__init__(
            cluster,
            "org.apache.kafka.tools.VerifiableProducer",
            ["--bootstrap-server", bootstrap, "--topic", topic, "--acks", "-1"]
            + ["--throughput", "100", "--value-prefix", "7"],
            "--producer.config",
            {
                "enable.idempotence": "true",
                "retries": "2147483647",
                "reconnect.backoff.max.ms": "1000",
                "linger.ms": "5",
            },
            workdir,
            "java-producer",
        )

    def line(self, line: str) -> None:
        try:
            data = json.loads(line)
        except ValueError:
            return
        if data.get("name") == "producer_send_success":
            self.acked[str(data["value"]).encode()] = (int(data["partition"]), int(data["offset"]))
        elif data.get("name") == "producer_send_error":
            self.failed.append(line)


@dataclass
class Replicas:
    cluster: KafkaCluster
    balancer: Balancer
    replicas: dict[str, GatewayProcess]
    history: str
    history_ends: dict[int, int]
    writes: str

    @property
    def bootstrap(self) -> str:
        return f"{self.balancer.host}:{self.balancer.ports[0]}"


@pytest.fixture
def replicas(gateway_cluster: KafkaCluster, tmp_path: Path) -> Iterator[Replicas]:
    history, writes = f"history-{uuid.uuid4().hex[:6]}", f"writes-{uuid.uuid4().hex[:6]}"
    create_topic(gateway_cluster, history)
    create_topic(gateway_cluster, writes, **{"min.insync.replicas": "2"})
    produce(gateway_cluster, history, HISTORY_RECORDS)
    remote = f"file://{tmp_path / 'tier'}"
    tier_and_trim(gateway_cluster, ["--remote", remote], history)
    probe = Consumer({"bootstrap.servers": gateway_cluster.bootstrap_servers, "group.id": "probe"})
    marks = {
        p: probe.get_watermark_offsets(TopicPartition(history, p), timeout=30) for p in range(PARTITIONS)
    }
    probe.close()
    assert all(low > 0 for low, _ in marks.values()), f"the trim left history on the brokers: {marks}"
    port = free_port_block(10)  # bootstrap, broker N at port + 1 + N (N = 1..3), metrics at port + 9
    replicas = {
        name: GatewayProcess(
            gateway_cluster.bootstrap_servers,
            remote,
            tmp_path / f"gateway-{name}",
            extra=["--advertised-host", "127.0.0.1"],
            port=port,
            metrics_port=port + 9,
            host=host,
        ).start()
        for name, host in (("a", "127.0.0.2"), ("b", "127.0.0.3"))
    }
    balancer = Balancer(
        [port, *(port + 1 + n for n in gateway_cluster.node_ids)], [r.host for r in replicas.values()]
    ).start()
    try:
        yield Replicas(
            gateway_cluster, balancer, replicas, history, {p: high for p, (_, high) in marks.items()}, writes
        )
    finally:
        balancer.stop()
        for replica in replicas.values():
            replica.kill()


def _restart(replicas: Replicas, name: str) -> None:
    """A rolling update's step for one replica: out of the Service, SIGTERM (it drains and exits 0), a new
    one started on the same ports, back in."""
    replica = replicas.replicas[name]
    replicas.balancer.take_out(replica.host)
    assert replica.stop() == 0, f"replica {name} did not exit cleanly on SIGTERM:\n{replica.log()[-3000:]}"
    replica.start()
    replicas.balancer.put_back(replica.host)


def test_a_rolling_restart_and_a_killed_replica_lose_and_repeat_nothing(
    replicas: Replicas, tmp_path: Path
) -> None:
    barriers = Barriers()
    ends = replicas.history_ends
    readers = [
        LibrdkafkaGroup(replicas.bootstrap, replicas.history, ends, barriers),
        LibrdkafkaGroup(
            replicas.bootstrap, replicas.history, ends, barriers, **{"group.protocol": "consumer"}
        ),
    ]
    java = JavaGroup(replicas.cluster, replicas.bootstrap, replicas.history, barriers, tmp_path)
    groups: list[LibrdkafkaGroup | JavaGroup] = [*readers, java]
    producer = LibrdkafkaProducer(replicas.bootstrap, replicas.writes)
    java_producer = JavaProducer(replicas.cluster, replicas.bootstrap, replicas.writes, tmp_path)
    a, b = replicas.replicas["a"], replicas.replicas["b"]
    try:
        for thread in (*groups, producer, java_producer):
            thread.start()

        def at_barrier(i: int) -> None:
            _until(
                lambda: (
                    all(g.count >= BARRIERS[i] for g in groups)
                    and bool(producer.acked)
                    and bool(java_producer.acked)
                ),
                f"every group read {BARRIERS[i]} records and both producers got acks "
                f"({[g.count for g in groups]}, {len(producer.acked)}, {len(java_producer.acked)})",
            )

        at_barrier(0)
        _restart(replicas, "a")
        a_restarted = replicas.balancer.connections[a.host]
        barriers.done[0].set()
        at_barrier(1)
        _restart(replicas, "b")
        b_restarted = replicas.balancer.connections[b.host]
        barriers.done[1].set()
        at_barrier(2)
        acked_before_kill = len(producer.acked)
        a.kill()  # stays in the Service: its new connections are refused until it is taken out
        barriers.done[2].set()
        at_barrier(3)
        assert len(producer.acked) > acked_before_kill, "the producer went on through the live replica"
        replicas.balancer.take_out(a.host)
        a.start()
        replicas.balancer.put_back(a.host)
        barriers.done[3].set()

        for group in readers:
            group.join(DEADLINE_S)
            assert not group.is_alive() and group.failure is None, (group.name, group.failure)
        _until(
            lambda: not problems(java.log, dict.fromkeys(ends, 0), ends),
            "the Java group read every record and committed the ends",
        )
    finally:
        for event in barriers.done:
            event.set()
        assert java.stop(60) in (0, 143)
        assert producer.stop() == 0, "librdkafka's producer left records unacknowledged"
        assert java_producer.stop() in (0, 143)

    for group in groups:
        assert problems(group.log, dict.fromkeys(ends, 0), ends) == [], group.name
    for group in readers:
        odd = [e for e in group.errors if e.fatal() or not (e.retriable() or e.code() in CONNECTION_ERRORS)]
        assert odd == [], f"{group.name}: errors other than a connection's: {odd}"
    java_errors = [line for t in (java, java_producer) for line in t.stderr_lines() if " ERROR " in line]
    assert java_errors == [] and java.commit_errors == [], (java_errors[:5], java.commit_errors[:5])
    odd = [e for e in producer.errors if e.fatal() or not (e.retriable() or e.code() in CONNECTION_ERRORS)]
    assert odd == [] and producer.failed == [], (odd, producer.failed[:5])
    assert java_producer.failed == []

    # Every acknowledged record is in Kafka once, where it was acknowledged; nothing else was written.
    stored = read_all(replicas.cluster.bootstrap_servers, replicas.writes)
    where: dict[bytes, list[tuple[int, int]]] = {}
    for partition, offset, _key, value in stored:
        assert value is not None
        where.setdefault(value, []).append((partition, offset))
    acked = {**producer.acked, **java_producer.acked}
    assert len(acked) == len(producer.acked) + len(java_producer.acked)
    assert {v: [at] for v, at in acked.items()} == where, "every acknowledged record once, and only those"
    # Each replica took connections after its restart (b's clients, b taken out, all went to a; a's, a
    # killed, went to b), and the killed one, still in the Service, refused some.
    connections = replicas.balancer.connections
    assert connections[a.host] > a_restarted and connections[b.host] > b_restarted, connections
    assert replicas.balancer.refused[a.host] > 0, replicas.balancer.refused
    print(  # what the clients went through, for whoever runs this with -s
        f"connections {dict(connections)}, refused {dict(replicas.balancer.refused)}; re-read records "
        f"{[g.log.delivered - sum(ends.values()) for g in groups]}; librdkafka errors "
        f"{sorted({e.name() for g in readers for e in g.errors} | {e.name() for e in producer.errors})}; "
        f"acknowledged {len(producer.acked)} + {len(java_producer.acked)}; Java client warnings "
        f"{sum(' WARN ' in line for t in (java, java_producer) for line in t.stderr_lines())}"
    )


def test_a_fetch_session_from_elsewhere_is_refused_and_no_replica_creates_one(tiered: Tiered) -> None:
    """A client that moves to another replica (or from a broker to the gateway) with a KIP-227 session
    gets FETCH_SESSION_ID_NOT_FOUND, the error after which Kafka clients fetch in full; a request to
    create a session is answered in full with session 0 (no session exists on any replica, so none can be
    missing on the next)."""
    topic = tiered.topic
    direct = RawClient.at(tiered.cluster.bootstrap_servers.split(",")[0])
    try:
        leader_of, direct_address = leaders(direct, topic)
    finally:
        direct.close()
    broker = RawClient.at(direct_address[leader_of[0]])
    start = tiered.log_starts[0]
    try:
        created = broker.call(FETCH, FETCH_VERSION, fetch_frame(topic, {0: start}, 3, session_epoch=0))
    finally:
        broker.close()
    assert created.error_code == 0 and created.session_id != 0, "the broker created a session"

    gateway = RawClient.at(tiered.gateway.bootstrap)
    try:
        _, gateway_address = leaders(gateway, topic)
    finally:
        gateway.close()
    client = RawClient.at(gateway_address[leader_of[0]])
    try:
        moved = client.call(
            FETCH,
            FETCH_VERSION,
            fetch_frame(topic, {0: start}, 4, session_id=created.session_id, session_epoch=1),
        )
        assert (moved.error_code, moved.session_id, moved.responses) == (FETCH_SESSION_ID_NOT_FOUND, 0, ())
        fresh = client.call(FETCH, FETCH_VERSION, fetch_frame(topic, {0: start}, 5, session_epoch=0))
        assert (fresh.error_code, fresh.session_id) == (0, 0)
        (partition,) = fresh.responses[0].partitions
        assert partition.error_code == 0 and partition.records, "a full answer, outside any session"
    finally:
        client.close()
