"""`make demo`: Tierkeeper end to end on an embedded default.

Starts a real 3-broker Kafka 4.x cluster on loopback (the test harness's), produces an orders topic,
then runs the real `tierkeeper` commands a user would: copy to a local remote tier, list it, read history
back from it, trim the brokers' local logs safely, and plan the replica fetchers. Everything lives under
.demo/ and the cluster is stopped at the end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import KafkaCluster

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".demo"
TOPIC = "orders"


def tierkeeper(*args: str) -> str:
    print(f"\n$ tierkeeper {' '.join(args)}", flush=True)
    proc = subprocess.run([sys.executable, "-m", "storage_core.cli", *args], capture_output=True, text=True)
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


def main() -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    remote = f"file://{WORK / 'remote-tier'}"
    print("starting a 3-broker Kafka cluster (KRaft) on loopback ...", flush=True)
    cluster = KafkaCluster(WORK / "kafka", brokers=3).start()
    try:
        bootstrap = cluster.bootstrap_servers
        print(f"bootstrap.servers={bootstrap}")
        produce(bootstrap)
        time.sleep(6)  # let the brokers checkpoint their high watermarks
        for node in cluster.node_ids:
            tierkeeper(
                "copy",
                "--log-dir",
                str(cluster.log_dir(node)),
                "--remote",
                remote,
                "--bootstrap-servers",
                bootstrap,
                "--topic",
                TOPIC,
                "--broker-id",
                str(node),
            )
        tierkeeper("ls", "--remote", remote, "--topic", TOPIC)
        tierkeeper(
            "read",
            "--remote",
            remote,
            "--topic",
            TOPIC,
            "--partition",
            "0",
            "--from-offset",
            "1000",
            "--max-records",
            "3",
        )
        tierkeeper(
            "cleanup",
            "--remote",
            remote,
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            TOPIC,
            "--local-retention-bytes",
            str(128 * 1024),
        )
        tierkeeper("fetchers", "plan", "--bootstrap-servers", bootstrap, "--max", "8")
        print(f"\ndemo done: the remote tier is in {WORK / 'remote-tier'}")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
