"""Real Apache Kafka 4.x brokers (KRaft) as child processes on loopback, for tests and e2e scripts.

Each node is a real JVM started from the Maven-resolved jars (see kafka_dist.py) with its own
``server.properties``, log dir and log file. The first min(n, 3) nodes are combined broker+controller
nodes forming the controller quorum; further nodes are brokers only, so a cluster keeps a quorum while
a test stops any single node.
"""

from __future__ import annotations

import base64
import gc
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import process
from harness.kafka_dist import (
    QUICK_START_FLAGS,
    HarnessError,
    class_archive,
    class_archive_flags,
    classpath,
    java_binary,
)
from harness.ports import free_ports, wait_port

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
logger.zk.name = org.apache.zookeeper
logger.zk.level = WARN
"""

TOOLS_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
"""

MAX_BROKERS = 6


@dataclass(frozen=True)
class SaslPlain:
    """A SASL/PLAIN user: the client listener becomes SASL_PLAINTEXT and accepts only this user (the
    brokers talk to each other as the same user); the controller listener stays PLAINTEXT."""

    username: str
    password: str

    def client_config(self) -> dict[str, str]:
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": self.username,
            "sasl.password": self.password,
        }


SASL_USER = SaslPlain("tierkeeper", "sasl-Pa55word-9c1e7b20")
"""The user of the tests' shared SASL broker (tests/conftest.py's ``sasl_broker``)."""


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    home: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def log_file(self) -> Path:
        return self.home / "server.log"

    @property
    def config_file(self) -> Path:
        return self.home / "server.properties"


@dataclass
class KafkaCluster:
    """A Kafka cluster of ``brokers`` nodes under ``workdir``; call start() then use bootstrap_servers."""

    workdir: Path
    brokers: int = 1
    broker_config: dict[str, str] = field(default_factory=dict)
    heap: str = "512m"
    start_timeout: float = 120.0
    cpus: dict[int, str] = field(default_factory=dict)
    """Node id -> CPU list (``taskset -c`` syntax) its JVM is confined to; benchmarks use it to give one
    broker cores of its own, as on its own machine. Nodes not listed run anywhere."""
    sasl: SaslPlain | None = None
    """Clients must authenticate with SASL/PLAIN as this user (``client_config`` holds the properties)."""
    tls: Path | None = None
    """A directory for a CA and a certificate for 127.0.0.1 (harness.tls): the client listener (and the
    brokers' own connections) then use TLS with them; ``client_config`` names the CA."""
    tls_client_auth: bool = False
    """With ``tls``: the listener requires a client certificate signed by the CA; ``client_config`` then
    names one (``client.pem``/``client-key.pem`` in ``tls``)."""
    jvm_flags: Sequence[str] = ()
    """More JVM flags of every broker (:func:`ensure_class_archive` records the archive with one)."""
    quick_start: bool = True
    """Start the broker JVMs with :data:`QUICK_START_FLAGS` and the class-data archive (a third of the CPU
    of a plain start); benchmarks turn it off to run brokers as production does."""
    log_dirs_per_broker: int = 1
    extra_listeners: Mapping[str, Mapping[int, tuple[int, int]]] = field(default_factory=dict)
    """More plaintext client listeners: name -> node id -> (port it listens on, port it advertises). A
    proxy on the advertised port in front of the listen port then keeps every client of it behind the
    proxy: Kafka answers Metadata with the listener's advertised addresses (the latency bench's byte
    pipe)."""
    """Entries of each node's ``log.dirs`` (JBOD): ``data``, then ``data-1``, ``data-2``... (the first one
    also holds the metadata log)."""
    _nodes: dict[int, _Node] = field(default_factory=dict, init=False)
    _cluster_id: str = field(default_factory=_cluster_id, init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.brokers <= MAX_BROKERS:
            raise HarnessError(f"brokers must be 1..{MAX_BROKERS}, got {self.brokers}")
        self.workdir = Path(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        ports = free_ports(2 * self.brokers)
        for i in range(self.brokers):
            node_id = i + 1
            home = self.workdir / f"node-{node_id}"
            home.mkdir(parents=True, exist_ok=True)
            self._nodes[node_id] = _Node(node_id, ports[2 * i], ports[2 * i + 1], home)
        (self.workdir / "log4j2.properties").write_text(LOG4J2)

    # ---- configuration -------------------------------------------------------------------------
    @property
    def voters(self) -> list[int]:
        return list(range(1, min(self.brokers, 3) + 1))

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._nodes)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self._nodes.values())

    def broker_address(self, node_id: int) -> str:
        return f"127.0.0.1:{self._nodes[node_id].port}"

    @property
    def client_config(self) -> dict[str, str]:
        """What a client needs besides bootstrap.servers: the SASL and TLS properties, or nothing."""
        config = {} if self.sasl is None else self.sasl.client_config()
        if self.tls is not None:
            config |= {
                "security.protocol": "SASL_SSL" if self.sasl is not None else "SSL",
                "ssl.ca.location": str(self.tls / "ca.pem"),
            }
            if self.tls_client_auth:
                config |= {
                    "ssl.certificate.location": str(self.tls / "client.pem"),
                    "ssl.key.location": str(self.tls / "client-key.pem"),
                }
        return config

    def _tls_properties(self) -> dict[str, str]:
        if self.tls is None:
            return {}
        from harness.tls import loopback_certificates

        if not (self.tls / "ca.pem").exists():
            loopback_certificates(self.tls)
        if self.tls_client_auth and not (self.tls / "client.pem").exists():
            from harness.tls import client_certificate

            cert, key = client_certificate(self.tls, "tierkeeper-test-client")
            (self.tls / "client.pem").write_text(cert)
            (self.tls / "client-key.pem").write_text(key)
        keystore = self.tls / "keystore.pem"  # Kafka's PEM keystore: the key and its certificate chain
        keystore.write_text((self.tls / "key.pem").read_text() + (self.tls / "cert.pem").read_text())
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls / "ca.pem"),
        } | ({"ssl.client.auth": "required"} if self.tls_client_auth else {})

    def _listener_properties(self, node: _Node, is_voter: bool) -> dict[str, str]:
        name = "PLAINTEXT" if self.sasl is None else "SASL_PLAINTEXT"
        if self.tls is not None:
            name = "SSL" if self.sasl is None else "SASL_SSL"
        extra = {n: ports[node.node_id] for n, ports in self.extra_listeners.items() if node.node_id in ports}
        props = {
            "listeners": f"{name}://127.0.0.1:{node.port}"
            + (f",CONTROLLER://127.0.0.1:{node.controller_port}" if is_voter else "")
            + "".join(f",{n}://127.0.0.1:{listen}" for n, (listen, _) in extra.items()),
            "advertised.listeners": f"{name}://127.0.0.1:{node.port}"
            + "".join(f",{n}://127.0.0.1:{advertised}" for n, (_, advertised) in extra.items()),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": f"{name}:{name},CONTROLLER:PLAINTEXT"
            + "".join(f",{n}:PLAINTEXT" for n in extra),
            "inter.broker.listener.name": name,
        }
        if self.sasl is not None:
            user, password = self.sasl.username, self.sasl.password
            props |= {
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                # The broker's own login (inter-broker) and the one user it accepts (user_<name>).
                f"listener.name.{name.lower()}.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="{user}" password="{password}" user_{user}="{password}";'
                ),
            }
        return props | self._tls_properties()

    def _properties(self, node: _Node) -> dict[str, str]:
        rf = str(min(self.brokers, 3))
        is_voter = node.node_id in self.voters
        props = {
            "process.roles": "broker,controller" if is_voter else "broker",
            "node.id": str(node.node_id),
            "controller.quorum.voters": ",".join(
                f"{v}@127.0.0.1:{self._nodes[v].controller_port}" for v in self.voters
            ),
            **self._listener_properties(node, is_voter),
            "log.dirs": ",".join(str(d) for d in self.log_dirs(node.node_id)),
            "num.partitions": "1",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            # Tests hold transactions open on purpose for as long as a module runs, which on a loaded
            # machine exceeded Kafka's default 15-minute ceiling (the coordinator aborted them and fenced
            # the producer). A day is longer than any test session.
            "transaction.max.timeout.ms": str(24 * 3600 * 1000),
        }
        props.update(self.broker_config)
        return props

    def _write_config(self, node: _Node) -> None:
        text = "".join(f"{k}={v}\n" for k, v in self._properties(node).items())
        node.config_file.write_text(text)

    def _java(
        self, main_class: str, *args: str, heap: str | None = None, flags: Sequence[str] = ()
    ) -> list[str]:
        return [
            java_binary(),
            f"-Xmx{heap or self.heap}",
            "-XX:+UseG1GC",
            *flags,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            classpath(),
            main_class,
            *args,
        ]

    def tool_command(self, main_class: str, *args: str, heap: str = "256m") -> list[str]:
        """The command line of one of Kafka's own tools or clients (``main_class``, from the same jars as
        the brokers), for a test to run: its stdout is the tool's output alone (warnings and errors are
        logged to stderr), and the JVM is set up for a short run (serial GC, C1 only: less CPU to start
        on a shared machine)."""
        config = self.workdir / "log4j2-tools.properties"
        if not config.exists():
            config.write_text(TOOLS_LOG4J2)
        return [
            java_binary(),
            f"-Xmx{heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={config}",
            "-cp",
            classpath(),
            main_class,
            *args,
        ]

    def _format(self, nodes: Iterable[_Node]) -> None:
        """``kafka-storage format`` of every node's log dir, the tools' JVMs run side by side."""
        running = []
        for node in nodes:
            for data in self.log_dirs(node.node_id):
                data.mkdir(parents=True, exist_ok=True)
            args = ["format", f"--cluster-id={self._cluster_id}", "-c", str(node.config_file)]
            command = self.tool_command("kafka.tools.StorageTool", *args, "--ignore-formatted")
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            running.append((node, proc))
        failed = []
        for node, proc in running:
            output, _ = proc.communicate()
            if proc.returncode != 0:
                failed.append(f"kafka-storage format failed for node {node.node_id}:\n{output}")
        if failed:
            raise HarnessError("\n".join(failed))

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> KafkaCluster:
        for node in self._nodes.values():
            self._write_config(node)
        self._format(self._nodes.values())
        for node_id in self.node_ids:
            self._spawn(self._nodes[node_id])
        self.wait_ready(self.node_ids)
        return self

    def _spawn(self, node: _Node, nice: int = 0) -> None:
        env = dict(os.environ)
        env.pop("KAFKA_OPTS", None)
        with open(node.log_file, "ab") as f:
            f.write(f"\n===== harness: starting node {node.node_id} at {time.time():.3f} =====\n".encode())
        flags = [*QUICK_START_FLAGS, *class_archive_flags()] if self.quick_start else []
        command = self._java("kafka.Kafka", str(node.config_file), flags=[*flags, *self.jvm_flags])
        if nice:
            # Every JVM thread inherits the niceness only if the process starts with it.
            command = ["nice", "-n", str(nice), *command]
        if node.node_id in self.cpus:
            command = ["taskset", "-c", self.cpus[node.node_id], *command]  # likewise for the affinity
        node.proc = process.spawn(command, log_path=node.log_file, env=env, cwd=node.home)

    def wait_ready(self, node_ids: list[int]) -> None:
        """Wait until every node listens and the cluster metadata lists it as a registered broker."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.start_timeout
        for node_id in node_ids:
            node = self._nodes[node_id]
            while not wait_port(node.port, 1.0):
                self._check_alive(node)
                if time.monotonic() > deadline:
                    raise HarnessError(
                        f"Kafka node {node_id} did not listen in {self.start_timeout}s:\n"
                        + self.server_log(node_id)[-4000:]
                    )
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, **self.client_config})
        wanted = set(node_ids)
        while True:
            try:
                md = admin.list_topics(timeout=5)
                if wanted <= set(md.brokers):
                    return
            except Exception:  # noqa: BLE001 - retried until the deadline, reported below
                pass
            for node_id in node_ids:
                self._check_alive(self._nodes[node_id])
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"Kafka brokers {sorted(wanted)} not all registered in {self.start_timeout}s"
                )
            time.sleep(0.5)

    def wait_topic(self, topic: str, partitions: int, timeout: float = 60.0) -> None:
        """Wait until every running broker's own metadata lists ``topic`` with a leader for each of
        its ``partitions``. A create or delete returns once the controller committed it; brokers
        learn of it a moment later, and until then a request routed to one of them fails with
        UNKNOWN_TOPIC_OR_PART (seen in CI)."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        running = [n for n in self.node_ids if self.is_running(n)]
        clients = {
            n: AdminClient({"bootstrap.servers": self.broker_address(n), **self.client_config})
            for n in running
        }
        pending = set(running)
        last = ""
        while pending:
            for node_id in sorted(pending):
                try:
                    md = clients[node_id].list_topics(topic, timeout=5).topics.get(topic)
                except Exception as exc:  # noqa: BLE001 - retried until the deadline, reported below
                    last = str(exc)
                    continue
                if md is None or md.error is not None or len(md.partitions) != partitions:
                    last = f"node {node_id}: {md.error if md is not None else 'absent'}"
                    continue
                if any(p.leader < 0 for p in md.partitions.values()):
                    last = f"node {node_id}: a partition has no leader yet"
                    continue
                pending.discard(node_id)
            if pending and time.monotonic() > deadline:
                raise HarnessError(
                    f"topic {topic} not visible on nodes {sorted(pending)} in {timeout}s: {last}"
                )
            if pending:
                time.sleep(0.2)

    def _check_alive(self, node: _Node) -> None:
        if node.proc is not None and node.proc.poll() is not None:
            raise HarnessError(
                f"Kafka node {node.node_id} exited with {node.proc.returncode}:\n"
                + self.server_log(node.node_id)[-4000:]
            )

    def stop_broker(self, node_id: int, kill: bool = False) -> None:
        node = self._nodes[node_id]
        if node.proc is not None:
            process.terminate(node.proc, kill=kill, timeout=90)
            node.proc = None

    def start_broker(self, node_id: int, wait: bool = True, nice: int = 0) -> None:
        """Start a stopped node; ``nice`` > 0 runs its JVM at lower CPU priority (benchmarks use it to
        model a broker on its own machine, whose start does not take CPU from the others)."""
        node = self._nodes[node_id]
        if node.proc is not None and node.proc.poll() is None:
            raise HarnessError(f"Kafka node {node_id} is already running")
        self._write_config(node)
        self._spawn(node, nice)
        if wait:
            self.wait_ready([node_id])

    def is_running(self, node_id: int) -> bool:
        proc = self._nodes[node_id].proc
        return proc is not None and proc.poll() is None

    def pid(self, node_id: int) -> int | None:
        """The node's JVM process id while it runs (for profiling from outside), else None."""
        proc = self._nodes[node_id].proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def wipe_log_dir(self, node_id: int, keep_meta: bool = True) -> None:
        """Delete the node's data in every log dir (it must be stopped); keep meta.properties to simulate
        replaced disks."""
        if self.is_running(node_id):
            raise HarnessError(f"stop node {node_id} before wiping its log dir")
        for data in self.log_dirs(node_id):
            for entry in data.iterdir():
                if keep_meta and entry.name == "meta.properties":
                    continue
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()

    def stop(self, graceful: bool = False) -> None:
        """Stop every node. Teardown kills by default: the data is scratch and a graceful stop of the
        last controllers would wait for a quorum that is already gone."""
        # Clients in unreachable reference cycles (a reconciler and its adapters) live until the cycle
        # collector runs; collected now they close while the brokers still answer, instead of logging
        # failed reconnects into every later test's output.
        gc.collect()
        for node_id in reversed(self.node_ids):
            self.stop_broker(node_id, kill=not graceful)

    # ---- inspection ----------------------------------------------------------------------------
    def log_dir(self, node_id: int) -> Path:
        """The node's first log dir (its only one unless ``log_dirs_per_broker`` says more)."""
        return self._nodes[node_id].data_dir

    def log_dirs(self, node_id: int) -> list[Path]:
        first = self._nodes[node_id].data_dir
        return [first, *(first.with_name(f"data-{i}") for i in range(1, self.log_dirs_per_broker))]

    def server_log(self, node_id: int) -> str:
        path = self._nodes[node_id].log_file
        return path.read_text(errors="replace") if path.exists() else ""

    def dump_log_segments(self, files: list[Path], deep: bool = True, print_data: bool = False) -> str:
        """Run Kafka's own DumpLogSegments on ``files`` and return its output."""
        args = ["--files", ",".join(str(f) for f in files)]
        if deep:
            args.append("--deep-iteration")
        if print_data:
            args.append("--print-data-log")
        proc = subprocess.run(
            self._java("kafka.tools.DumpLogSegments", *args, heap="512m"),
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise HarnessError(f"DumpLogSegments failed ({proc.returncode}): {proc.stderr[-3000:]}")
        return proc.stdout


def ensure_class_archive(workdir: Path) -> Path:
    """The class-data archive of a broker JVM (:func:`harness.kafka_dist.class_archive`), recorded once per
    machine by a one-node cluster that starts, serves one topic and stops gracefully (the JVM writes the
    archive as it exits). ``workdir`` is scratch space for that cluster."""
    archive = class_archive()
    if archive.is_file():
        return archive
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    cluster = KafkaCluster(workdir, brokers=1, jvm_flags=(f"-XX:ArchiveClassesAtExit={partial}",))
    try:
        _create_topic(cluster.start(), "warm-up")
    finally:
        cluster.stop(graceful=True)
    if not partial.is_file():
        raise HarnessError(
            f"the broker JVM wrote no class-data archive; its log:\n{cluster.server_log(1)[-3000:]}"
        )
    partial.replace(archive)  # atomic: another session never maps a half-written archive
    return archive


def _create_topic(cluster: KafkaCluster, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(60)
    cluster.wait_topic(name, 1)
