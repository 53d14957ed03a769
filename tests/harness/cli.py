"""Start real components by hand: ``python -m harness.cli kafka --brokers 3``, ``... moto`` or ``... k8s``."""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
from pathlib import Path

from harness.control_plane import ControlPlane
from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer


def main() -> None:
    parser = argparse.ArgumentParser(prog="harness")
    sub = parser.add_subparsers(dest="what", required=True)
    kafka = sub.add_parser("kafka", help="a KRaft Kafka cluster on loopback")
    kafka.add_argument("--brokers", type=int, default=1)
    kafka.add_argument("--workdir", type=Path)
    kafka.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    moto = sub.add_parser("moto", help="a moto S3 server on loopback")
    moto.add_argument("--workdir", type=Path)
    k8s = sub.add_parser("k8s", help="a Kubernetes control plane with the process kubelet on loopback")
    k8s.add_argument("--workdir", type=Path)
    k8s.add_argument("--nodes", type=int, default=1)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"tierkeeper-{args.what}-"))
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    if args.what == "kafka":
        config = dict(item.split("=", 1) for item in args.config)
        cluster = KafkaCluster(workdir, brokers=args.brokers, broker_config=config).start()
        print(f"bootstrap.servers={cluster.bootstrap_servers}")
        for node_id in cluster.node_ids:
            print(f"node {node_id}: log dir {cluster.log_dir(node_id)}")
        print("Ctrl-C stops the cluster", flush=True)
        while not stopping:
            time.sleep(0.5)
        cluster.stop(graceful=True)
    elif args.what == "k8s":
        plane = ControlPlane(workdir, nodes=args.nodes).start()
        print(f"kubeconfig: {plane.kubeconfig}")
        print(f"export KUBECONFIG={plane.kubeconfig}   (API server {plane.url}; component logs in {workdir})")
        print("Ctrl-C stops the control plane", flush=True)
        while not stopping:
            time.sleep(0.5)
        plane.stop()
    else:
        server = MotoServer(workdir).start()
        print(f"endpoint_url={server.endpoint_url}  (Ctrl-C stops it)", flush=True)
        while not stopping:
            time.sleep(0.5)
        server.stop()


if __name__ == "__main__":
    main()
