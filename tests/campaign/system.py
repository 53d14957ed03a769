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
from harness.topics import create_again
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.store import RemoteStore

SEGMENT_BYTES = 64 * 1024
LOCAL_RETENTION_BYTES = 96 * 1024
"""Small enough that every step's reconcile trims: most of a topic's history lives only in the tier."""
PARTITIONS = 3
REMOTE_RETENTION_MS = 86_400_000
"""The retention topic's remote (and local) time window: one day. Its records are stamped by the producer,
so a clock jump moves them across it without waiting."""
REMOTE_RETENTION_BYTES = 100 * 1024
"""The retention topic's remote size window per partition: below two segments, so every round deletes."""
RETENTION_TOPIC_KAFKA_MS = 3 * REMOTE_RETENTION_MS
"""Kafka's own retention.ms for it: at least local window + copy interval + margin (the local-trim rule,
docs/reliability.md), and longer than the remote window."""
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
    events: list[str] = field(default_factory=list)
    """What happened beside the round (operator mode: the operator's pods killed and recreated)."""


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
    retention_topics: set[str] = field(default_factory=set)
    """Topics with finite remote retention (REMOTE_RETENTION_MS / _BYTES); the others keep everything."""
    delete_policy_topics: set[str] = field(default_factory=set)
    """Topics whose TieredTopic says ``deletionPolicy: Delete`` (operator mode)."""
    deleted: dict[str, list[tuple[str, dict[int, int]]]] = field(default_factory=dict)
    spark: Any = None
    """A PySpark local session: the checks then read through the Spark source as well (long runs)."""
    reconcile_started_ms: int = 0
    """When the last reconcile round began (its cleanup's clock is at least this)."""
    """Topic -> its deleted incarnations: (topic id, partition -> the tier's last offset at the delete)."""

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

    def storage_options(self) -> dict[str, Any]:
        """The tier's fsspec options: through the fault proxy, short timeouts, no cached listings."""
        config = {"s3": {"addressing_style": "path"}, "read_timeout": 2.0, "connect_timeout": 5}
        return {
            "client_kwargs": {"endpoint_url": self.proxy.endpoint_url},
            "config_kwargs": config,
            "use_listings_cache": False,
        }

    def _write_cluster_file(self) -> None:
        cluster = {
            "name": "campaign",
            "bootstrapServers": self.cluster.bootstrap_servers,
            "remote": {"url": self.remote, "storageOptions": self.storage_options()},
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
                    **({"deletionPolicy": "Delete"} if topic in self.delete_policy_topics else {}),
                    **(
                        {
                            "localRetentionMs": REMOTE_RETENTION_MS,
                            "remoteRetentionMs": REMOTE_RETENTION_MS,
                            "remoteRetentionBytes": REMOTE_RETENTION_BYTES,
                        }
                        if topic in self.retention_topics
                        else {}
                    ),
                },
            }
            for topic in self.topics
        ]
        (manifests / "all.yaml").write_text(yaml.safe_dump_all(docs))

    def _topic_config(self, name: str) -> dict[str, str]:
        retention = RETENTION_TOPIC_KAFKA_MS if name in self.retention_topics else -1
        return {
            "internal.segment.bytes": str(SEGMENT_BYTES),
            "retention.ms": str(retention),
            "min.insync.replicas": "2",
        }

    def create_topics(
        self, *names: str, retention: tuple[str, ...] = (), delete_policy: tuple[str, ...] = ()
    ) -> None:
        """``retention``: those of ``names`` with finite remote retention; ``delete_policy``: those whose
        TieredTopic says ``deletionPolicy: Delete``."""
        self.retention_topics.update(retention)
        self.delete_policy_topics.update(delete_policy)
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap_servers})
        new = [
            NewTopic(name, PARTITIONS, replication_factor=3, config=self._topic_config(name))
            for name in names
        ]
        for future in admin.create_topics(new).values():
            future.result(120)
        for name in names:
            self.cluster.wait_topic(name, PARTITIONS)
        self.topics += names
        self._write_manifests()

    def topic_id(self, topic: str) -> str:
        """Kafka's id of the live incarnation of ``topic`` (22 characters, as the remote layout has it)."""
        admin = KafkaAdmin(self.cluster.bootstrap_servers)
        return next(iter(admin.describe([topic]).values())).topic_id

    def recreate_topic(self, topic: str, timeout: float = 180.0) -> str:
        """Delete ``topic`` and create it again under the same name; the deleted incarnation's records move
        aside in the ledger. Returns the deleted incarnation's id."""
        old_id = self.topic_id(topic)
        tiered = {p: end for (tid, p), end in self.tier_ends(topic).items() if tid == old_id}
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap_servers})
        for future in admin.delete_topics([topic]).values():
            future.result(120)
        self.ledger.delete_incarnation(topic, old_id)
        self.deleted.setdefault(topic, []).append((old_id, tiered))
        config = self._topic_config(topic)
        create_again(admin, NewTopic(topic, PARTITIONS, replication_factor=3, config=config), timeout)
        self.cluster.wait_topic(topic, PARTITIONS)
        if self.topic_id(topic) == old_id:
            raise AssertionError(f"{topic} recreated with its old id {old_id}")
        return old_id

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
    def produce(
        self, topic: str, first: int, count: int, *, size: int = 200, timestamp: int | None = None
    ) -> None:
        """``count`` uniquely numbered records, acks=all and idempotent; the acknowledged ones (with the
        offsets the broker gave) go into the ledger, the others into its unacknowledged set.
        ``timestamp``: the CreateTime of the first record (each next one 1 ms later), kept in the
        ledger."""
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
                stamped = msg.timestamp()[1] if timestamp is not None else None
                self.ledger.ack(Record(msg.topic(), msg.partition(), msg.offset(), msg.value(), stamped))
            else:
                self.ledger.unacknowledged.add(msg.value())

        for i in range(first, first + count):
            value = f"{topic}:{i:09d}:".encode().ljust(size, b".")
            stamp = {} if timestamp is None else {"timestamp": timestamp + i - first}
            producer.produce(topic, key=str(i).encode(), value=value, on_delivery=delivered, **stamp)
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
    def reconcile(self, *, fault: str | None = None, kill_operator_at: str | None = None) -> ReconcileResult:
        """One ``tierkeeper standalone --once`` round; ``fault`` (``point:n``) kills it there."""
        if kill_operator_at is not None:
            raise ValueError(
                "no operator to kill in standalone mode (the plan draws it only with --operator)"
            )
        env = self._env()
        self.reconcile_started_ms = int(time.time() * 1000)
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

    def quiesce(self) -> None:
        """Nothing reconciles until the next ``reconcile``: true of standalone rounds by construction (the
        operator mode scales the operator down and drains its Jobs)."""

    def delete_tiered_topic(self, topic: str, moment: str) -> str:
        """Delete ``topic``'s TieredTopic (``deletionPolicy: Delete``) at ``moment``; operator mode only."""
        raise ValueError(
            "standalone mode has no TieredTopic to delete (the plan draws it only with --operator)"
        )

    def wait_tiered_topics_gone(self) -> dict[str, str]:
        """Deleted TieredTopics still there after the deadline, with why (operator mode)."""
        return {}

    def bucket_objects(self, topic: str) -> list[str]:
        """Every key in the bucket under any incarnation of ``topic`` (``<topic>-<topic id>/...``), listed
        by s3fs itself rather than through the storage core's catalog."""
        import s3fs

        keys: list[str] = s3fs.S3FileSystem(**self.moto.storage_options()).find(self.bucket)
        dir_name = f"{self.bucket}/{topic}-"
        # A topic id is 22 characters and may hold "-" itself.
        return [
            k for k in keys if k.startswith(dir_name) and k[len(dir_name) + 22 : len(dir_name) + 23] == "/"
        ]

    def set_s3_plan(self, plan: FaultPlan) -> None:
        self.proxy.set_plan(plan)

    def rebuild_broker(self, node_id: int) -> dict[str, Any]:
        """What the rebuild init container does before a broker pod starts: ``tierkeeper rebuild
        --if-empty`` into its (wiped) log dir, through the same S3 endpoint as the reconciler."""
        stdout = self._tierkeeper(
            [
                "rebuild",
                "--if-empty",
                "--log-dir",
                str(self.cluster.log_dir(node_id)),
                "--broker-id",
                str(node_id),
                "--bootstrap-servers",
                self.cluster.bootstrap_servers,
                "--local-retention-bytes",
                str(LOCAL_RETENTION_BYTES),
                "--json",
                *self._remote_args(self.proxy.endpoint_url),
            ],
            f"tierkeeper rebuild of broker {node_id}",
        )
        summary: dict[str, Any] = json.loads(stdout)
        return summary

    def wait_in_isr(self, node_id: int, topics: list[str], timeout: float = 240.0) -> str | None:
        """None once ``node_id`` is in the ISR of every partition of ``topics``, else why not (at the
        deadline: a broker that never catches up is a finding, not a hang)."""
        admin = KafkaAdmin(self.cluster.bootstrap_servers)
        deadline = time.monotonic() + timeout
        while True:
            described = admin.describe(topics)
            missing = sorted(f"{t}-{p}" for (t, p), info in described.items() if node_id not in info.isr)
            if not missing:
                return None
            if time.monotonic() > deadline:
                return f"broker {node_id} not in the ISR of {missing} after {timeout:.0f} s"
            time.sleep(0.5)

    def elect_preferred_leaders(self, topics: list[str]) -> None:
        """Move leadership back to the preferred replicas (a rebuilt broker leads its share again, so the
        checks read what it restored)."""
        from confluent_kafka import ElectionType

        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap_servers})
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        try:
            admin.elect_leaders(ElectionType.PREFERRED, tps).result(60)
        except KafkaException:
            pass  # ELECTION_NOT_NEEDED for partitions already led by their preferred replica

    def tier_ends(self, topic: str) -> dict[tuple[str, int], int]:
        """(topic id, partition) -> the last offset the tier serves (``tierkeeper ls``)."""
        ends: dict[tuple[str, int], int] = {}
        for row in self.tier_listing(topic):
            if row["serves_to"] is not None:
                key = (row["topic_id"], row["partition"])
                ends[key] = max(ends.get(key, -1), row["serves_to"])
        return ends

    def tier_listing(self, topic: str | None = None) -> list[dict[str, Any]]:
        """``tierkeeper ls --json``: every remote segment (of ``topic``) with its state."""
        stdout = self._tierkeeper(
            [
                "ls",
                *(["--topic", topic] if topic else []),
                "--json",
                *self._remote_args(self.moto.endpoint_url),
            ],
            "tierkeeper ls",
            timeout=600,
        )
        rows: list[dict[str, Any]] = json.loads(stdout)["segments"]
        return rows

    def sweep(self, topic: str) -> None:
        """The orphan sweep with no grace (``tierkeeper cleanup --orphan-grace-ms 0``): safe here because
        no copy runs between reconcile rounds, so every unfinished attempt is a dead one."""
        self._tierkeeper(
            [
                "cleanup",
                "--topic",
                topic,
                "--orphan-grace-ms",
                "0",
                "--json",
                *self._remote_args(self.proxy.endpoint_url),
            ],
            f"the orphan sweep of {topic}",
        )

    def cleanup_retention(self, topic: str) -> None:
        """One remote-retention pass over ``topic`` as the reconciler's cleanup runs it (its TieredTopic's
        windows), without Kafka: so the pass deletes by retention only, never below a log start."""
        self._tierkeeper(
            [
                "cleanup",
                "--topic",
                topic,
                "--remote-retention-ms",
                str(REMOTE_RETENTION_MS),
                "--remote-retention-bytes",
                str(REMOTE_RETENTION_BYTES),
                "--json",
                *self._remote_args(self.proxy.endpoint_url),
            ],
            f"the retention pass over {topic}",
        )

    def served_segments(self, topic: str) -> dict[int, list[tuple[int, int, int]]]:
        """Partition -> (first offset, last offset, .log object bytes as the bucket lists them) of each
        segment the live incarnation of ``topic`` serves, in offset order (the storage core's catalog
        and cover)."""
        from storage_core.remote.catalog import PartitionCatalog, list_partitions
        from storage_core.remote.layout import RemoteLayout

        store = RemoteStore(self.remote, self.moto.storage_options())
        layout = RemoteLayout(store.root)
        out: dict[int, list[tuple[int, int, int]]] = {p: [] for p in range(PARTITIONS)}
        for tp in list_partitions(store, layout, topic, self.topic_id(topic)):
            catalog = PartitionCatalog(store, layout, tp)
            listing = catalog.listing()
            cover = catalog.rebuild_manifest(listing, write=False).cover()
            out[tp.partition] = [
                (r.first_offset, r.last_offset, listing.segments[r.segment.segment_id].objects.get("log", 0))
                for r in cover.ranges
            ]
        return out

    def unreferenced_objects(self, topic: str) -> list[str]:
        """Objects of every incarnation of ``topic`` that no metadata references: not part of a segment
        the manifest serves (the storage core's own catalog and cover), nor a manifest or partition
        state."""
        from storage_core.adapters.store import RemoteStore
        from storage_core.remote.catalog import PartitionCatalog, list_partitions, list_topics
        from storage_core.remote.layout import RemoteLayout

        store = RemoteStore(self.remote, self.moto.storage_options())
        layout = RemoteLayout(store.root)
        found: list[str] = []
        for name, topic_id in list_topics(store, layout):
            if name != topic:
                continue
            for tp in list_partitions(store, layout, name, topic_id):
                catalog = PartitionCatalog(store, layout, tp)
                listing = catalog.listing()
                serving = {
                    r.segment.segment_id
                    for r in catalog.rebuild_manifest(listing, write=False).cover().ranges
                }
                found += listing.strays
                for entry in listing.segments.values():
                    if entry.objects and entry.segment_id not in serving:
                        data, _ = catalog.segment_keys(entry)
                        state = entry.state.value if entry.state else "no marker"
                        found += [f"{key} ({state})" for key in data]
        return found

    def put_stray(self, topic: str, partition: int, name: str) -> None:
        """An object no metadata references in the live incarnation's partition dir (for tests of the
        check)."""
        from storage_core.remote.layout import RemoteLayout, TopicPartitionId

        store = RemoteStore(self.remote, self.moto.storage_options())
        tp = TopicPartitionId(topic, self.topic_id(topic), partition)
        store.put_atomic(f"{RemoteLayout(store.root).partition_dir(tp)}/{name}", b"stray")

    def _remote_args(self, endpoint: str) -> list[str]:
        return ["--remote", self.remote, "--endpoint-url", endpoint, "--path-style"]

    def _tierkeeper(self, args: list[str], what: str, timeout: float = RECONCILE_TIMEOUT) -> str:
        """The stdout of ``tierkeeper <args>``; an AssertionError naming ``what`` when it fails."""
        proc = subprocess.run(
            [sys.executable, "-m", "storage_core.cli", *args],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env=self._env(),
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise AssertionError(f"{what} failed: {proc.stderr[-2000:]}")
        return proc.stdout

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
        self, topic: str, *, read_committed: bool, timeout: float = 300.0, from_earliest: bool = False
    ) -> list[Record]:
        """Every record of ``topic`` from offset 0 (``from_earliest``: from the earliest offset the
        gateway lists, for a topic whose retention deletes) to the end, as an unchanged Kafka client sees
        it through the gateway."""
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
            marks = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=60)
                for p in range(PARTITIONS)
            }
            ends = {p: high for p, (_, high) in marks.items()}
            positions = {p: low if from_earliest else 0 for p, (low, _) in marks.items()}
            consumer.assign([TopicPartition(topic, p, positions[p]) for p in range(PARTITIONS)])
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

    def read_spark(self, topic: str, topic_id: str | None, *, read_committed: bool) -> list[Record]:
        """Every record of the tier through ``spark.read.format("tierkeeper")`` from its earliest offset."""
        options = {
            "remote": self.remote,
            "topic": topic,
            "endpointUrl": self.moto.endpoint_url,
            "pathStyle": "true",
            "storage.key": DUMMY_KEY,
            "storage.secret": DUMMY_SECRET,
            "startingOffsets": "earliest",
            "kafka.isolation.level": "read_committed" if read_committed else "read_uncommitted",
            **({"topicId": topic_id} if topic_id else {}),
        }
        rows = (
            self.spark.read.format("tierkeeper")
            .options(**options)
            .load()
            .select("partition", "offset", "value")
            .collect()
        )
        return sorted(
            (Record(topic, r["partition"], r["offset"], bytes(r["value"])) for r in rows),
            key=lambda r: (r.partition, r.offset),
        )

    def read_tier(
        self, topic: str, partition: int, topic_id: str | None = None, *, from_offset: int = 0
    ) -> list[Record]:
        """What ``tierkeeper read`` returns from the tier (read_committed, its default) from offset
        ``from_offset`` (where the tier begins, for a topic whose retention deletes); ``topic_id`` names
        the incarnation once the topic was deleted and recreated."""
        stdout = self._tierkeeper(
            [
                "read",
                "--topic",
                topic,
                "--partition",
                str(partition),
                "--from-offset",
                str(from_offset),
                *(["--topic-id", topic_id] if topic_id else []),
                *self._remote_args(self.moto.endpoint_url),
            ],
            f"tierkeeper read {topic}-{partition}",
            timeout=600,
        )
        records = []
        for line in stdout.splitlines():
            row = json.loads(line)
            records.append(Record(topic, partition, int(row["offset"]), _value(row)))
        return records


def _value(row: dict[str, Any]) -> bytes:
    import base64

    value = row.get("value")
    if value is None:
        return b""
    return value["utf8"].encode() if "utf8" in value else base64.b64decode(value["base64"])
