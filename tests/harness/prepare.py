"""Fetch everything the tests start, once per machine: Kafka's jars, Spark's Kafka connector jars and the
helm/kubectl binaries."""

from __future__ import annotations

import sys

from harness.kafka_dist import HarnessError, java_binary, kafka_libs, kafka_version


def main() -> int:
    try:
        java_binary()
        libs = kafka_libs()
        print(f"[harness] Kafka {kafka_version()} jars: {libs}")
        from harness.spark_kafka import connector_jars, connector_version

        print(f"[harness] Spark {connector_version()} Kafka connector: {len(connector_jars())} jars")
        try:
            from harness import tools
        except ImportError:
            return 0
        for name, path in tools.ensure_tools().items():
            print(f"[harness] {name}: {path}")
    except HarnessError as exc:
        print(f"[harness] cannot prepare the test harness: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
