#!/usr/bin/env bash
# Broker rebuild on the e2e cluster (after test-tiering.sh): broker 2 loses its volume (PVC and pod
# deleted, as after a node loss), the rebuild init container restores its tiered segments from MinIO
# before Kafka starts, and the broker rejoins the ISR of every partition. Asserts that the init
# container restored segments, that no partition dir came back as "-stray", and that the ISR is full.
# The init container: manifests/kafka-rebuild-init.yaml (docs/rebuild.md, "On Kubernetes").
set -euo pipefail
# shellcheck source=e2e/k8s/lib.sh
source "$(dirname "$0")/lib.sh"

TOPIC=orders
BROKER=2
POD="kafka-$BROKER"

log "adding the rebuild init container to the Kafka StatefulSet"
kubectl -n "$KAFKA_NAMESPACE" patch statefulset kafka --type strategic \
  --patch-file "$E2E_DIR/manifests/kafka-rebuild-init.yaml"
kubectl -n "$KAFKA_NAMESPACE" rollout status statefulset/kafka --timeout="$TIMEOUT"
# On a log dir that holds data the init container must be a no-op.
noop=$(kubectl -n "$KAFKA_NAMESPACE" logs "$POD" -c tierkeeper-rebuild)
log "init container on a full log dir: $noop"

log "replacing broker $BROKER's volume"
kubectl -n "$KAFKA_NAMESPACE" delete pvc "data-$POD" --wait=false
kubectl -n "$KAFKA_NAMESPACE" delete pod "$POD" --wait=true
kubectl -n "$KAFKA_NAMESPACE" wait --for=condition=Ready --timeout="$TIMEOUT" "pod/$POD"

summary=$(kubectl -n "$KAFKA_NAMESPACE" logs "$POD" -c tierkeeper-rebuild)
python3 - "$summary" <<'PY' || die "the init container restored nothing: $summary"
import json, sys
text = sys.argv[1]
summary, _ = json.JSONDecoder().raw_decode(text[text.index("{"):])  # `rebuild --json`'s summary
print(f"rebuild: {summary['action']}, {summary['restored_partitions']} partitions, "
      f"{summary['downloaded_bytes']} bytes restored", file=sys.stderr)
sys.exit(0 if summary["restored_partitions"] > 0 and summary["downloaded_bytes"] > 0 else 1)
PY

log "checking for -stray partition dirs on $POD"
if kubectl -n "$KAFKA_NAMESPACE" exec "$POD" -c kafka -- ls "/var/lib/kafka/data/kafka-log$BROKER" | grep -q -- '-stray$'; then
  die "Kafka marked restored partitions as stray"
fi

full_isr() {
  kafka_tool kafka-0 kafka-topics.sh --bootstrap-server "$BOOTSTRAP" --describe --topic "$TOPIC" \
    | awk -v b="$BROKER" '/Partition:/ { for (i = 1; i <= NF; i++) if ($i == "Isr:") isr = $(i + 1);
        n = split(isr, ids, ","); found = 0; for (j = 1; j <= n; j++) if (ids[j] == b) found = 1;
        if (!found) missing = 1 } END { exit missing }'
}
retry_until 600 full_isr || die "broker $BROKER did not rejoin every ISR"
kubectl -n "$KAFKA_NAMESPACE" get tieredbroker "$POD" -o yaml
log "rebuild OK"
