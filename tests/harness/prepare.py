"""Fetch everything the tests start, once per machine: Kafka's jars, the helm/kubectl binaries and the
kstatus checker (built from tests/kstatus with Go)."""

from __future__ import annotations

import sys

from harness.kafka_dist import HarnessError, java_binary, kafka_libs, kafka_version


def main() -> int:
    try:
        java_binary()
        libs = kafka_libs()
        print(f"[harness] Kafka {kafka_version()} jars: {libs}")
        try:
            from harness import tools
        except ImportError:
            return 0
        for name, path in tools.ensure_tools().items():
            print(f"[harness] {name}: {path}")
        from harness.kstatus import ensure_kstatus

        print(f"[harness] kstatus checker: {ensure_kstatus()}")
    except HarnessError as exc:
        print(f"[harness] cannot prepare the test harness: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
