"""`make demo`: Tierkeeper end to end on an embedded default.

Starts a real 3-broker Kafka 4.x cluster on loopback (the test harness's), produces an orders topic,
then runs what a user would: `tierkeeper standalone --once` with the resources in examples/standalone/
(the operator's reconcile decisions without Kubernetes: copy from each partition leader's log dir to a
local remote tier, clean up and trim the brokers' local logs behind the tier, print the status table and
each broker's num.replica.fetchers proposal, which `--approve-fetchers` would apply),
then lists the remote tier, reads history back from it, shows Kafka's log start offsets behind the tier,
starts `tierkeeper gateway` in front of the cluster and reads the topic from offset 0 with a plain Kafka
consumer through it, beside a consumer connected straight to the brokers, and plans the replica fetchers.
Everything lives under .demo/ and the cluster is stopped at the end.
"""

from __future__ import annotations

import json
import shutil
import string
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway import GatewayProcess
from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_admin import KafkaAdmin

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".demo"
TOPIC = "orders"
EXAMPLES = ROOT / "examples" / "standalone"


def tierkeeper(*args: str, echo: bool = True) -> str:
    if echo:
        print(f"\n$ tierkeeper {' '.join(args)}", flush=True)
    proc = subprocess.run([sys.executable, "-m", "storage_core.cli", *args], capture_output=True, text=True)
    if echo:
        print(proc.stdout.rstrip())
    if proc.returncode != 0:
        print(proc.stderr.rstrip(), file=sys.stderr)
        raise SystemExit(f"demo step failed: tierkeeper {args[0]} exited {proc.returncode}")
    return proc.stdout


def produce(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics(
        [NewTopic(TOPIC, 6, 3, config={"internal.segment.bytes": str(64 * 1024), "retention.ms": "-1"})]
    )[TOPIC].result(60)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 10,
            "compression.type": "lz4",
            "batch.size": 16384,  # batches must fit the small demo segments
            "enable.idempotence": True,
        }
    )
    now = int(time.time() * 1000)
    errors: list[object] = []
    for i in range(60_000):
        order = {"order": i, "customer": i % 977, "amount_cents": (i * 7919) % 100_000}
        producer.produce(
            TOPIC,
            key=str(i % 977).encode(),
            value=json.dumps(order).encode(),
            headers=[("source", b"demo")],
            timestamp=now - (60_000 - i) * 100,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
        if i % 5000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0 or errors:
        raise SystemExit(f"producing the demo data failed: {errors[:3]}")
    print(f"produced 60,000 orders to {TOPIC} (6 partitions, RF 3, 64 KiB segments)")


def render_examples(values: dict[str, str]) -> tuple[Path, Path]:
    """examples/standalone/ with this cluster's addresses and log dirs filled in."""
    manifests = WORK / "manifests"
    manifests.mkdir(parents=True)
    for path in EXAMPLES.glob("*.yaml"):
        text = string.Template(path.read_text()).substitute(values)
        (WORK if path.name == "cluster.yaml" else manifests).joinpath(path.name).write_text(text)
    return WORK / "cluster.yaml", manifests


def show_trim(bootstrap: str, remote: str) -> None:
    admin = KafkaAdmin(bootstrap)
    starts = admin.log_start_offsets([(TOPIC, p) for p in range(6)])
    ends = admin.high_watermarks([(TOPIC, p) for p in range(6)])
    segments = json.loads(tierkeeper("ls", "--remote", remote, "--topic", TOPIC, "--json", echo=False))
    finished = [s for s in segments["segments"] if s["state"] == "COPY_FINISHED"]
    print("\nKafka trimmed its local logs only behind the remote tier:")
    print("partition  kafka log start  kafka log end  remote tier offsets")
    for p in range(6):
        mine = [s for s in finished if s["partition"] == p]
        tier = f"{min(s['base_offset'] for s in mine)}..{max(s['end_offset'] for s in mine)}" if mine else "-"
        print(f"{p:>9}  {starts[(TOPIC, p)]:>15}  {ends[(TOPIC, p)]:>13}  {tier}")


def consume_from_start(bootstrap: str) -> dict[int, tuple[int, int]]:
    """partition -> (first offset, records) a plain consumer reads from the beginning to the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo", "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(6)])
        seen: dict[int, tuple[int, int]] = {}
        at_end: set[int] = set()
        while len(at_end) < 6:
            msg = consumer.poll(30)
            if msg is None:
                raise RuntimeError(f"no record within 30 s (partitions at their end: {sorted(at_end)})")
            if msg.error():
                at_end.add(msg.partition())
                continue
            first, count = seen.get(msg.partition(), (msg.offset(), 0))
            seen[msg.partition()] = (first, count + 1)
        return seen
    finally:
        consumer.close()


def show_gateway(bootstrap: str, remote: str) -> None:
    gateway = GatewayProcess(bootstrap, remote, WORK / "gateway").start()
    try:
        print(
            f"\n$ tierkeeper gateway --bootstrap-servers {bootstrap} --remote {remote} "
            f"--listen {gateway.bootstrap}"
        )
        print(gateway.banner)
        direct = consume_from_start(bootstrap)
        through = consume_from_start(gateway.bootstrap)
        print("\nA plain Kafka consumer from the beginning, straight to the brokers and through the gateway:")
        print("partition  direct: first offset  records    gateway: first offset  records")
        for p in range(6):
            d_first, d_count = direct.get(p, (-1, 0))
            g_first, g_count = through.get(p, (-1, 0))
            print(f"{p:>9}  {d_first:>20}  {d_count:>7}    {g_first:>21}  {g_count:>7}")
        total = sum(c for _, c in through.values())
        print(
            f"through the gateway: {total} records from offset 0 "
            "(history from the tier, then the brokers' tail)"
        )
    finally:
        gateway.stop()


def main() -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    remote = f"file://{WORK / 'remote-tier'}"
    print("starting a 3-broker Kafka cluster (KRaft) on loopback ...", flush=True)
    cluster = KafkaCluster(WORK / "kafka", brokers=3).start()
    try:
        bootstrap = cluster.bootstrap_servers
        print(f"bootstrap.servers={bootstrap}")
        produce(bootstrap)
        values = {"BOOTSTRAP": bootstrap, "REMOTE": remote}
        values.update({f"LOG_DIR_{node}": str(cluster.log_dir(node)) for node in cluster.node_ids})
        cluster_file, manifests = render_examples(values)
        tierkeeper("standalone", "--cluster", str(cluster_file), "--manifests", str(manifests), "--once")
        tierkeeper(
            "read",
            "--remote",
            remote,
            "--topic",
            TOPIC,
            "--partition",
            "0",
            "--from-offset",
            "0",
            "--max-records",
            "3",
        )
        show_trim(bootstrap, remote)
        show_gateway(bootstrap, remote)
        tierkeeper("fetchers", "plan", "--bootstrap-servers", bootstrap, "--max", "8")
        print(f"\ndemo done: the remote tier is in {WORK / 'remote-tier'}")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
