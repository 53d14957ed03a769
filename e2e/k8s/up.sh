#!/usr/bin/env bash
# Bring up the e2e environment on a throw-away kind or k3d cluster: build the two images, load them,
# install MinIO, a 3-node KRaft Kafka (apache/kafka image) and the Tierkeeper chart.
#
#   e2e/k8s/up.sh                        # kind if installed, else k3d
#   CLUSTER_TOOL=k3d e2e/k8s/up.sh
#
# Needs docker, kind or k3d, python3. helm/kubectl from PATH, else the test harness's copies.
# DEPENDS ON the chart and operator of issues 15 and 18 (values keys in manifests/values.yaml).
set -euo pipefail
# shellcheck source=e2e/k8s/lib.sh
source "$(dirname "$0")/lib.sh"

TOOL=$(cluster_tool)
command -v docker >/dev/null || die "docker is required to build the images"
log "cluster tool $TOOL, helm $HELM, kubectl $KUBECTL, kubeconfig $KUBECONFIG"

log "building $OPERATOR_IMAGE and $PIPELINE_IMAGE"
revision=$(git -C "$E2E_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
for target in operator pipeline; do
  DOCKER_BUILDKIT=1 docker build --target "$target" --build-arg "REVISION=$revision" \
    --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)" -t "$IMAGE_REPO/$target:$IMAGE_TAG" "$E2E_ROOT"
done

if [[ ! -s $KUBECONFIG ]]; then
  log "creating $TOOL cluster $CLUSTER_NAME"
  case "$TOOL" in
    kind) kind create cluster --name "$CLUSTER_NAME" --kubeconfig "$KUBECONFIG" --wait 120s ;;
    k3d)
      k3d cluster create "$CLUSTER_NAME" --wait --kubeconfig-update-default=false
      k3d kubeconfig get "$CLUSTER_NAME" >"$KUBECONFIG"
      ;;
    *) die "unknown CLUSTER_TOOL $TOOL (kind or k3d)" ;;
  esac
fi
for image in "$OPERATOR_IMAGE" "$PIPELINE_IMAGE"; do
  case "$TOOL" in
    kind) kind load docker-image "$image" --name "$CLUSTER_NAME" ;;
    k3d) k3d image import "$image" --cluster "$CLUSTER_NAME" ;;
  esac
done

log "MinIO"
kubectl apply -f "$E2E_DIR/manifests/minio.yaml"
kubectl -n "$MINIO_NAMESPACE" rollout status deployment/minio --timeout="$TIMEOUT"

log "Kafka"
kubectl apply -f "$E2E_DIR/manifests/kafka.yaml"
# The bucket's credentials, for the operator's Jobs and the scripts' one-off pods (test values, see minio.yaml).
for namespace in "$KAFKA_NAMESPACE" "$RELEASE_NAMESPACE"; do
  kubectl create namespace "$namespace" --dry-run=client -o yaml | kubectl apply -f -
  kubectl -n "$namespace" create secret generic tierkeeper-s3 --dry-run=client -o yaml \
    --from-literal=AWS_ACCESS_KEY_ID=e2e-access-key --from-literal=AWS_SECRET_ACCESS_KEY=e2e-secret-key \
    --from-literal=AWS_DEFAULT_REGION=us-east-1 | kubectl apply -f -
done
kubectl -n "$KAFKA_NAMESPACE" rollout status statefulset/kafka --timeout="$TIMEOUT"

log "Tierkeeper chart (CRDs included: crds.enabled)"
helm upgrade --install tierkeeper "$E2E_ROOT/charts/tierkeeper" --namespace "$RELEASE_NAMESPACE" \
  --create-namespace -f "$E2E_DIR/manifests/values.yaml" --take-ownership --wait --timeout "$TIMEOUT"
kubectl wait --for=condition=Established --timeout="$TIMEOUT" \
  crd/tieredtopics.tierkeeper.io crd/tieredbrokers.tierkeeper.io
log "up: KUBECONFIG=$KUBECONFIG"
