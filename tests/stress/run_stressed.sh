#!/usr/bin/env bash
# Run the whole test suite RUNS times in a row (default 3) while tests/stress/burn.py keeps every core
# busy, and print one summary line per run (date, pass/fail counts, duration, command). Exits non-zero
# when any run had a failure. Usage: tests/stress/run_stressed.sh [RUNS] [extra pytest args...]
set -u
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
shift || true
PY=.venv/bin/python
LOGDIR=${STRESS_LOG_DIR:-.stress-logs}
mkdir -p "$LOGDIR"
"$PY" tests/stress/burn.py "${STRESS_BURNERS:-$(nproc)}" >"$LOGDIR/burn.log" 2>&1 &
BURNER=$!
trap 'kill "$BURNER" 2>/dev/null; wait "$BURNER" 2>/dev/null' EXIT
failed=0
for run in $(seq 1 "$RUNS"); do
  cmd=(env -u AWS_DEFAULT_REGION -u AWS_PROFILE "$PY" -m pytest -q -p no:cacheprovider "$@")
  started=$(date -u +%FT%TZ)
  t0=$(date +%s)
  "${cmd[@]}" >"$LOGDIR/run-$run.log" 2>&1
  rc=$?
  t1=$(date +%s)
  summary=$(grep -E '^[0-9=]* ?[0-9]+ (passed|failed)|(passed|failed|error).* in [0-9.]+s' "$LOGDIR/run-$run.log" | tail -1)
  echo "run $run/$RUNS: started $started, exit $rc, $((t1 - t0)) s wall, load 1/5 min $(cut -d' ' -f1,2 /proc/loadavg): $summary; command: ${cmd[*]}"
  [ "$rc" -eq 0 ] || failed=1
done
exit "$failed"
