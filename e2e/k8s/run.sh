#!/usr/bin/env bash
# The whole e2e run on a throw-away cluster: up.sh, test-tiering.sh, test-rebuild.sh, then teardown.
#
#   e2e/k8s/run.sh                       # kind if installed, else k3d
#   KEEP_CLUSTER=1 e2e/k8s/run.sh        # leave the cluster up (KUBECONFIG is printed)
#
# See e2e/README.md for what depends on unfinished issues and why CI does not run this.
set -euo pipefail
# shellcheck source=e2e/k8s/lib.sh
source "$(dirname "$0")/lib.sh"

finish() {
  local status=$?
  if ((status != 0)); then
    log "operator log and resources (failure):"
    kubectl -n "$RELEASE_NAMESPACE" logs deployment/tierkeeper --tail=200 2>/dev/null || true
    kubectl get tieredtopics,tieredbrokers,jobs -A -o wide 2>/dev/null || true
  fi
  if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
    log "cluster kept; KUBECONFIG=$KUBECONFIG"
  else
    "$E2E_DIR/down.sh" || true
  fi
  exit "$status"
}
trap finish EXIT

"$E2E_DIR/up.sh"
"$E2E_DIR/test-tiering.sh"
"$E2E_DIR/test-rebuild.sh"
log "all e2e checks passed"
