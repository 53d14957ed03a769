#!/usr/bin/env bash
# Tiering and trimming on the e2e cluster (after up.sh): a topic with small segments gets data, a
# TieredTopic and the TieredBrokers are applied, and the script asserts that
#   1. the TieredTopic becomes Ready (kstatus: Current) with a remote summary,
#   2. finished segments of every partition are in MinIO (read with the pipeline image's `tierkeeper ls`),
#   3. Kafka's log start offset advances (local trim) but never past the tiered end offset + 1,
#   4. offset 0, trimmed from the brokers, is still served from the remote tier (`tierkeeper read`).
# DEPENDS ON issue 15 (the operator running copy and cleanup Jobs, status.remote) landing.
set -euo pipefail
# shellcheck source=e2e/k8s/lib.sh
source "$(dirname "$0")/lib.sh"

TOPIC=orders
PARTITIONS=3

log "topic $TOPIC: $PARTITIONS partitions, RF 3, 1 MiB segments, no Kafka retention (Tierkeeper trims)"
kafka_tool kafka-0 kafka-topics.sh --bootstrap-server "$BOOTSTRAP" --create --if-not-exists --topic "$TOPIC" \
  --partitions "$PARTITIONS" --replication-factor 3 \
  --config segment.bytes=1048576 --config retention.ms=-1 --config retention.bytes=-1

log "producing 12 MiB"
kafka_tool kafka-0 kafka-producer-perf-test.sh --topic "$TOPIC" --num-records 12288 --record-size 1024 \
  --throughput -1 --producer-props "bootstrap.servers=$BOOTSTRAP" acks=all >/dev/null

log "applying TieredTopic/TieredBroker"
kubectl apply -f "$E2E_DIR/manifests/tiering.yaml"
kubectl -n "$KAFKA_NAMESPACE" wait --for=condition=Ready --timeout="$TIMEOUT" "tieredtopic/$TOPIC" \
  tieredbroker/kafka-0 tieredbroker/kafka-1 tieredbroker/kafka-2

remote_segments() {
  local n
  n=$(kubectl -n "$KAFKA_NAMESPACE" get "tieredtopic/$TOPIC" -o jsonpath='{.status.remote.segments}')
  [[ ${n:-0} -gt 0 ]]
}
retry_until 600 remote_segments || die "status.remote.segments stayed empty"

log "remote tier content (tierkeeper ls)"
pipeline_run tk-ls tierkeeper ls "${REMOTE_FLAGS[@]}" --topic "$TOPIC" --json >"$E2E_WORKDIR/ls.json"
python3 - "$E2E_WORKDIR/ls.json" "$PARTITIONS" <<'PY' || die "not every partition has finished segments in MinIO"
import json, sys
rows = json.load(open(sys.argv[1]))["segments"]
finished = {r["partition"] for r in rows if r["end_offset"] is not None}
print(f"{len(rows)} remote segments, partitions with finished segments: {sorted(finished)}", file=sys.stderr)
sys.exit(0 if finished == set(range(int(sys.argv[2]))) else 1)
PY

log "waiting for the local trim (log start offset > 0 on every partition)"
earliest() {
  kafka_tool kafka-0 kafka-get-offsets.sh --bootstrap-server "$BOOTSTRAP" --topic "$TOPIC" --time -2
}
all_trimmed() { earliest | awk -F: '$3 == 0 { bad = 1 } END { exit bad }'; }
retry_until 900 all_trimmed || die "Kafka's log start offset never advanced: $(earliest | tr '\n' ' ')"

log "checking that no partition was trimmed past its tier"
pipeline_run tk-ls tierkeeper ls "${REMOTE_FLAGS[@]}" --topic "$TOPIC" --json >"$E2E_WORKDIR/ls.json"
earliest >"$E2E_WORKDIR/earliest.txt"
python3 - "$E2E_WORKDIR/ls.json" "$E2E_WORKDIR/earliest.txt" <<'PY' || die "a partition was trimmed above its tiered end"
import json, sys
rows = json.load(open(sys.argv[1]))["segments"]
tiered_end = {}
for r in rows:
    if r["end_offset"] is not None:
        tiered_end[r["partition"]] = max(tiered_end.get(r["partition"], -1), r["end_offset"])
ok = True
for line in open(sys.argv[2]):
    _, partition, start = line.strip().rsplit(":", 2)
    limit = tiered_end.get(int(partition), -1) + 1
    print(f"partition {partition}: log start {start}, tiered end + 1 = {limit}", file=sys.stderr)
    ok &= int(start) <= limit
sys.exit(0 if ok else 1)
PY

log "reading offset 0 of partition 0 back from the remote tier"
first=$(pipeline_run tk-read tierkeeper read "${REMOTE_FLAGS[@]}" --topic "$TOPIC" --partition 0 \
  --from-offset 0 --max-records 1)
[[ $first == *'"offset": 0'* || $first == *'"offset":0'* ]] || die "offset 0 not served remotely: $first"

kubectl -n "$KAFKA_NAMESPACE" get tieredtopics,tieredbrokers -o wide
log "tiering OK"
