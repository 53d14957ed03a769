"""The real system a campaign round runs against: a 3-broker Kafka (RF 3, min.insync.replicas 2), moto S3
behind the fault proxy, ``tierkeeper standalone`` as the reconciler (the round the operator also runs, in
a process of its own so it can be killed at a fault point), the gateway, and the producers whose
acknowledgements go into the ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from campaign.ledger import Ledger, Record
from harness.gateway import GatewayProcess
from harness.kafka import KafkaCluster
from harness.moto_s3 import DUMMY_KEY, DUMMY_SECRET, MotoServer
from harness.paths import REPO_ROOT
from harness.s3_faults import FaultPlan, FaultProxy

SEGMENT_BYTES = 64 * 1024
LOCAL_RETENTION_BYTES = 96 * 1024
"""Small enough that every step's reconcile trims: most of a topic's history lives only in the tier."""
PARTITIONS = 3
RECONCILE_TIMEOUT = 600.0
S3_ERROR_PLAN = FaultPlan(
    rates={"error_500": 0.08, "slow_down": 0.08, "reset": 0.04}, seed=34, max_in_a_row=2
)
S3_OUTAGE_PLAN = FaultPlan(rates={"error_500": 1.0}, seed=34, max_in_a_row=1 << 30)


@dataclass
class ReconcileResult:
    returncode: int
    killed_at: str | None
    statuses: dict[str, Any] = field(default_factory=dict)
    stderr: str = ""


@dataclass
class CampaignSystem:
    workdir: Path
    cluster: KafkaCluster
    moto: MotoServer
    proxy: FaultProxy
    bucket: str
    gateway: GatewayProcess | None = None
    topics: list[str] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)

    # ---- setup ---------------------------------------------------------------------------------
    @classmethod
    def start(cls, workdir: Path, moto: MotoServer) -> CampaignSystem:
        import s3fs

        workdir.mkdir(parents=True, exist_ok=True)
        cluster = KafkaCluster(
            workdir / "kafka",
            brokers=3,
            broker_config={
                "min.insync.replicas": "2",
                "default.replication.factor": "3",
                "offsets.topic.replication.factor": "3",
                "transaction.state.log.replication.factor": "3",
                "transaction.state.log.min.isr": "2",
                "unclean.leader.election.enable": "false",
            },
        ).start()
        bucket = f"campaign-{os.getpid()}-{int(time.time())}"
        s3fs.S3FileSystem(**moto.storage_options()).mkdir(bucket)
        proxy = FaultProxy(moto.endpoint_url, FaultPlan()).start()
        system = cls(workdir, cluster, moto, proxy, bucket)
        system._write_cluster_file()
        system.start_gateway()
        return system

    def stop(self) -> None:
        if self.gateway is not None:
            self.gateway.kill()
        self.proxy.stop()
        self.cluster.stop()

    @property
    def remote(self) -> str:
        return f"s3://{self.bucket}"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "AWS_ACCESS_KEY_ID": DUMMY_KEY, "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET}

    def _write_cluster_file(self) -> None:
        config = {"s3": {"addressing_style": "path"}, "read_timeout": 2.0, "connect_timeout": 5}
        cluster = {
            "name": "campaign",
            "bootstrapServers": self.cluster.bootstrap_servers,
            "remote": {
                "url": self.remote,
                "storageOptions": {
                    "client_kwargs": {"endpoint_url": self.proxy.endpoint_url},
                    "config_kwargs": config,
                    "use_listings_cache": False,
                },
            },
        }
        (self.workdir / "cluster.yaml").write_text(yaml.safe_dump(cluster))
        self._write_manifests()

    def _write_manifests(self) -> None:
        manifests = self.workdir / "manifests"
        manifests.mkdir(exist_ok=True)
        docs: list[dict[str, Any]] = [
            {
                "apiVersion": "tierkeeper.io/v1alpha1",
                "kind": "TieredBroker",
                "metadata": {"name": f"broker-{n}", "namespace": "campaign"},
                "spec": {
                    "clusterRef": {"name": "campaign"},
                    "brokerId": n,
                    "logDir": {"path": str(self.cluster.log_dir(n))},
                },
            }
            for n in self.cluster.node_ids
        ]
        docs += [
            {
                "apiVersion": "tierkeeper.io/v1alpha1",
                "kind": "TieredTopic",
                "metadata": {"name": topic, "namespace": "campaign"},
                "spec": {
                    "clusterRef": {"name": "campaign"},
                    "topic": topic,
                    "localRetentionMs": -1,
                    "localRetentionBytes": LOCAL_RETENTION_BYTES,
                },
            }
            for topic in self.topics
        ]
        (manifests / "all.yaml").write_text(yaml.safe_dump_all(docs))

    def create_topics(self, *names: str) -> None:
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap_servers})
        config = {
            "internal.segment.bytes": str(SEGMENT_BYTES),
            "retention.ms": "-1",
            "min.insync.replicas": "2",
        }
        new = [NewTopic(name, PARTITIONS, replication_factor=3, config=config) for name in names]
        for future in admin.create_topics(new).values():
            future.result(120)
        for name in names:
            self.cluster.wait_topic(name, PARTITIONS)
        self.topics += names
        self._write_manifests()

    def retire(self, *names: str) -> None:
        """Stop reconciling a checked round's topics (their tier stays): every round then costs the same,
        however long the campaign."""
        self.topics = [t for t in self.topics if t not in names]
        self._write_manifests()
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap_servers})
        for future in admin.delete_topics(list(names)).values():
            future.result(120)

    # ---- the gateway ---------------------------------------------------------------------------
    def start_gateway(self) -> None:
        port, metrics = (self.gateway.port, self.gateway.metrics_port) if self.gateway else (0, 0)
        self.gateway = GatewayProcess(
            self.cluster.bootstrap_servers,
            self.remote,
            self.workdir / "gateway",
            # Straight to moto: the fault proxy's plans are aimed at the reconciler's requests.
            extra=["--endpoint-url", self.moto.endpoint_url],
            env={"AWS_ACCESS_KEY_ID": DUMMY_KEY, "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET},
            port=port,
            metrics_port=metrics,
        ).start()

    def kill_gateway(self) -> None:
        assert self.gateway is not None
        self.gateway.kill()

    # ---- producing -----------------------------------------------------------------------------
    def produce(self, topic: str, first: int, count: int, *, size: int = 200) -> None:
        """``count`` uniquely numbered records, acks=all and idempotent; the acknowledged ones (with the
        offsets the broker gave) go into the ledger, the others into its unacknowledged set."""
        producer = Producer(
            {
                "bootstrap.servers": self.cluster.bootstrap_servers,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "batch.size": 16384,
                "message.timeout.ms": 120000,
            }
        )

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self.ledger.ack(Record(msg.topic(), msg.partition(), msg.offset(), msg.value()))
            else:
                self.ledger.unacknowledged.add(msg.value())

        for i in range(first, first + count):
            value = f"{topic}:{i:09d}:".encode().ljust(size, b".")
            producer.produce(topic, key=str(i).encode(), value=value, on_delivery=delivered)
            if i % 256 == 0:
                producer.poll(0)
        left = producer.flush(180)
        if left:
            raise AssertionError(f"{left} produce requests to {topic} unanswered after 180 s")

    def produce_transactions(self, topic: str, first: int, count: int, txn_id: str) -> None:
        """One committed and one aborted transaction of ``count`` records each."""
        producer = Producer(
            {
                "bootstrap.servers": self.cluster.bootstrap_servers,
                "transactional.id": txn_id,
                "linger.ms": 5,
                "transaction.timeout.ms": 60000,
            }
        )
        producer.init_transactions(120)
        for commit, start in ((True, first), (False, first + count)):
            sent: list[Record] = []

            def delivered(err: Any, msg: Any, sent: list[Record] = sent) -> None:
                if err is None:
                    sent.append(Record(msg.topic(), msg.partition(), msg.offset(), msg.value()))

            producer.begin_transaction()
            values = [
                f"{topic}:{i:09d}:{'c' if commit else 'a'}:".encode().ljust(200, b".")
                for i in range(start, start + count)
            ]
            for i, value in enumerate(values):
                producer.produce(topic, key=str(start + i).encode(), value=value, on_delivery=delivered)
            try:
                producer.flush(120)
                if commit:
                    producer.commit_transaction(120)
                    for record in sent:
                        self.ledger.ack(record)
                else:
                    producer.abort_transaction(120)
                    self.ledger.abort(sent)
            except KafkaException as error:
                # The outcome is unknown unless the error says the transaction can be aborted.
                if error.args[0].txn_requires_abort():
                    producer.abort_transaction(120)
                    self.ledger.abort(sent)
                else:
                    self.ledger.unacknowledged.update(values)

    # ---- reconciling ---------------------------------------------------------------------------
    def reconcile(self, *, fault: str | None = None) -> ReconcileResult:
        """One ``tierkeeper standalone --once`` round; ``fault`` (``point:n``) kills it there."""
        env = self._env()
        if fault:
            env["TIERKEEPER_FAULT"] = f"{fault}:kill"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "storage_core.cli",
                "standalone",
                "--cluster",
                str(self.workdir / "cluster.yaml"),
                "--manifests",
                str(self.workdir / "manifests"),
                "--once",
                "--json",
            ],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env=env,
            timeout=RECONCILE_TIMEOUT,
        )
        killed = fault if proc.returncode == -9 else None
        statuses: dict[str, Any] = {}
        if proc.returncode in (0, 1) and proc.stdout.strip():
            statuses = json.loads(proc.stdout).get("tieredTopics", {})
        return ReconcileResult(proc.returncode, killed, statuses, proc.stderr[-4000:])

    def set_s3_plan(self, plan: FaultPlan) -> None:
        self.proxy.set_plan(plan)

    # ---- reading -------------------------------------------------------------------------------
    def log_start_offsets(self, topic: str) -> dict[int, int]:
        consumer = Consumer(
            {"bootstrap.servers": self.cluster.bootstrap_servers, "group.id": "campaign-probe"}
        )
        try:
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[0]
                for p in range(PARTITIONS)
            }
        finally:
            consumer.close()

    def read_through_gateway(
        self, topic: str, *, read_committed: bool, timeout: float = 300.0
    ) -> list[Record]:
        """Every record of ``topic`` from offset 0 to the end, as an unchanged Kafka client sees it
        through the gateway."""
        assert self.gateway is not None
        consumer = Consumer(
            {
                "bootstrap.servers": self.gateway.bootstrap,
                "group.id": f"campaign-check-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed" if read_committed else "read_uncommitted",
                "auto.offset.reset": "error",
            }
        )
        records: list[Record] = []
        try:
            ends = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=60)[1]
                for p in range(PARTITIONS)
            }
            consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
            positions = dict.fromkeys(range(PARTITIONS), 0)
            deadline = time.monotonic() + timeout
            while any(positions[p] < ends[p] for p in positions):
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{topic}: read through the gateway stuck at {positions}, ends {ends}"
                    )
                for msg in consumer.consume(500, 1.0):
                    if msg.error():
                        tier = [
                            line for line in self.gateway.metrics().splitlines() if "tier_partitions" in line
                        ]
                        raise AssertionError(
                            f"{topic}-{msg.partition()}: the gateway answered {msg.error()} at positions "
                            f"{positions} (ends {ends}); gateway: {tier}; "
                            f"its log: {self.gateway.log()[-1500:]}"
                        )
                    records.append(Record(topic, msg.partition(), msg.offset(), msg.value()))
                    positions[msg.partition()] = msg.offset() + 1
                for p in positions:
                    if positions[p] < ends[p]:
                        # A transaction marker or aborted records may end a partition: ask where it is.
                        position = consumer.position([TopicPartition(topic, p)])[0].offset
                        if position >= 0:
                            positions[p] = max(positions[p], position)
        finally:
            consumer.close()
        return records

    def read_tier(self, topic: str, partition: int) -> list[Record]:
        """What ``tierkeeper read`` returns from the tier (read_committed, its default)."""
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "storage_core.cli",
                "read",
                "--topic",
                topic,
                "--partition",
                str(partition),
                "--from-offset",
                "0",
                "--remote",
                self.remote,
                "--endpoint-url",
                self.moto.endpoint_url,
            ],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env=self._env(),
            timeout=600,
        )
        if proc.returncode != 0:
            raise AssertionError(f"tierkeeper read {topic}-{partition} failed: {proc.stderr[-2000:]}")
        records = []
        for line in proc.stdout.splitlines():
            row = json.loads(line)
            records.append(Record(topic, partition, int(row["offset"]), _value(row)))
        return records


def _value(row: dict[str, Any]) -> bytes:
    import base64

    value = row.get("value")
    if value is None:
        return b""
    return value["utf8"].encode() if "utf8" in value else base64.b64decode(value["base64"])
