#!/usr/bin/env bash
# Delete the e2e cluster and its working directory.
set -euo pipefail
# shellcheck source=e2e/k8s/lib.sh
source "$(dirname "$0")/lib.sh"

case "$(cluster_tool)" in
  kind) kind delete cluster --name "$CLUSTER_NAME" ;;
  k3d) k3d cluster delete "$CLUSTER_NAME" ;;
esac
rm -rf "$E2E_WORKDIR"
