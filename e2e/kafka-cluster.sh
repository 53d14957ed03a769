#!/usr/bin/env bash
# Start a real Kafka 4.x KRaft cluster on loopback for manual experiments: e2e/kafka-cluster.sh [BROKERS]
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
PYTHONPATH=tests exec .venv/bin/python -m harness.cli kafka --brokers "${1:-1}"
