#!/usr/bin/env bash
# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this file
# Shared helpers of the e2e scripts (sourced, not run). Everything here talks to the throw-away cluster
# whose kubeconfig is $KUBECONFIG under $E2E_WORKDIR; the user's own kubeconfig is never read.

E2E_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
E2E_DIR="$E2E_ROOT/e2e/k8s"
CLUSTER_NAME=${CLUSTER_NAME:-tierkeeper-e2e}
E2E_WORKDIR=${E2E_WORKDIR:-${TMPDIR:-/tmp}/tierkeeper-e2e-$CLUSTER_NAME}
IMAGE_REPO=${IMAGE_REPO:-tierkeeper}
IMAGE_TAG=${IMAGE_TAG:-e2e}
OPERATOR_IMAGE="$IMAGE_REPO/operator:$IMAGE_TAG"
PIPELINE_IMAGE="$IMAGE_REPO/pipeline:$IMAGE_TAG"
RELEASE_NAMESPACE=${RELEASE_NAMESPACE:-tierkeeper-system}
KAFKA_NAMESPACE=kafka
MINIO_NAMESPACE=minio
TIMEOUT=${TIMEOUT:-300s}
export KUBECONFIG="$E2E_WORKDIR/kubeconfig"
mkdir -p "$E2E_WORKDIR"

log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

cluster_tool() {
  if [[ -n "${CLUSTER_TOOL:-}" ]]; then echo "$CLUSTER_TOOL"
  elif command -v kind >/dev/null; then echo kind
  elif command -v k3d >/dev/null; then echo k3d
  else die "neither kind nor k3d is installed"; fi
}

harness_tool() {
  # $1: helm or kubectl. The one on PATH, else the binary the test harness unpacks into its cache.
  if command -v "$1" >/dev/null; then command -v "$1"; return; fi
  local python="$E2E_ROOT/.venv/bin/python"
  [[ -x $python ]] || make -s -C "$E2E_ROOT" setup >&2
  PYTHONPATH="$E2E_ROOT/tests" "$python" -c "from harness.tools import tool_path; print(tool_path('$1'))"
}

HELM=${HELM:-$(harness_tool helm)}
KUBECTL=${KUBECTL:-$(harness_tool kubectl)}
kubectl() { "$KUBECTL" "$@"; }
helm() { "$HELM" "$@"; }

# Run a Kafka CLI tool inside broker pod $1: kafka_tool kafka-0 kafka-topics.sh --bootstrap-server ...
kafka_tool() {
  local pod=$1
  shift
  kubectl -n "$KAFKA_NAMESPACE" exec "$pod" -c kafka -- "/opt/kafka/bin/$1" "${@:2}"
}
BOOTSTRAP=localhost:9092  # as seen from inside a broker pod

# Poll until "$@" succeeds, giving up after $1 seconds: retry_until 300 cmd args...
retry_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    (( SECONDS < deadline )) || return 1
    sleep 5
  done
}

# The pipeline image run as a one-off pod in the Kafka namespace with the bucket's credentials (restricted
# security context, as the operator's Jobs run): pipeline_run NAME tierkeeper ls ... ; prints its output.
pipeline_run() {
  local name=$1
  shift
  kubectl -n "$KAFKA_NAMESPACE" delete pod "$name" --ignore-not-found --wait=true >/dev/null
  python3 - "$name" "$PIPELINE_IMAGE" "$@" <<'PY' | kubectl -n "$KAFKA_NAMESPACE" apply -f - >/dev/null
import json, sys
name, image, *command = sys.argv[1:]
print(json.dumps({
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
    "spec": {"restartPolicy": "Never", "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
             "containers": [{"name": "run", "image": image, "imagePullPolicy": "Never", "command": command,
                             "envFrom": [{"secretRef": {"name": "tierkeeper-s3"}}],
                             "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                             "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                 "capabilities": {"drop": ["ALL"]}}}],
             "volumes": [{"name": "tmp", "emptyDir": {}}]}}))
PY
  if ! kubectl -n "$KAFKA_NAMESPACE" wait --for=jsonpath='{.status.phase}'=Succeeded --timeout="$TIMEOUT" \
    "pod/$name" >/dev/null; then
    kubectl -n "$KAFKA_NAMESPACE" logs "$name" >&2 || true
    return 1
  fi
  kubectl -n "$KAFKA_NAMESPACE" logs "$name"
}

# Remote tier settings shared by every tierkeeper command the scripts run (MinIO, path-style).
REMOTE_URL="s3://tierkeeper-tiered/e2e"
REMOTE_FLAGS=(--remote "$REMOTE_URL" --endpoint-url http://minio.minio.svc:9000 --path-style --region us-east-1)
