"""`make demo`: Tierkeeper end to end on an embedded default.

Starts a real 3-broker Kafka 4.x cluster on loopback (the test harness's), produces an orders topic,
then runs what a user would: `tierkeeper standalone --once` with the resources in examples/standalone/
(the operator's reconcile decisions without Kubernetes: copy from each partition leader's log dir to a
local remote tier, clean up and trim the brokers' local logs behind the tier, print the status table and
each broker's num.replica.fetchers proposal, which `--approve-fetchers` would apply),
then lists the remote tier, reads history back from it, shows Kafka's log start offsets behind the tier,
and plans the replica fetchers. Everything lives under .demo/ and the cluster is stopped at the end.
"""

from __future__ import annotations

import json
import shutil
import string
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

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
        tierkeeper("fetchers", "plan", "--bootstrap-servers", bootstrap, "--max", "8")
        print(f"\ndemo done: the remote tier is in {WORK / 'remote-tier'}")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
