#!/usr/bin/env bash
# Months of traffic in an hour: orders through their whole life (created, shipped once CONFIRMED,
# delivered, removed) at a steady fraction of the measured peak while the same process drains,
# with every retention window compressed, so that the steady state of a long-running database is
# reached. Once a minute it records commit -> CONFIRMED p50/p99, the drain rate, claim time, the
# size of every table and index, dead tuples, autovacuum runs, outboxd's RSS and its database
# connections; at the end it judges whether every curve went flat (the last 10 minutes within
# +-10 % of the 10 before) and draws the curves with gnuplot.
#
#   bench/soak.sh [--minutes N] [--fraction F] [--rate R] [--retention D] [--out STEM]
#     --minutes    how long the steady load runs (default 60; --smoke: 1)
#     --fraction   of the peak, measured first by a 60 s calibration (default 0.6)
#     --rate       orders/s, instead of a calibration
#     --retention  every retention window: processed events, audit rows, resolved dead letters,
#                  removed orders (default 2m)
#     --out STEM   writes STEM.json, STEM.md and STEM-*.png (default
#                  bench/results/<date>-soak; --smoke: a temporary folder)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH="$ROOT/bench"
OUTBOXD=${OUTBOXD:-$ROOT/build/release/outboxd}
minutes=60 fraction=0.6 rate="" retention=2m stem="" calibrate_s=60 smoke=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) minutes=${2:?}; shift ;;
    --fraction) fraction=${2:?}; shift ;;
    --rate) rate=${2:?}; shift ;;
    --retention) retention=${2:?}; shift ;;
    --out) stem=${2:?}; shift ;;
    --smoke) smoke=1 minutes=1 calibrate_s=15 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "usage: bench/soak.sh [--minutes N] [--fraction F] [--rate R] [--retention D] [--out STEM] [--smoke]" >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$OUTBOXD" ]] || { echo "bench/soak.sh: build $OUTBOXD first" >&2; exit 1; }

WORK=$(mktemp -d /tmp/outboxd-soak.XXXXXX)
chmod 755 "$WORK"
mkdir -p "$WORK/logs"
RAW=/dev/null
source "$BENCH/lib/common.sh"
trap cleanup EXIT INT TERM
[[ -n "$stem" ]] || stem=$(results_stem soak)
soak() { "$PYTHON" "$BENCH/lib/soak.py" "$@"; }
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown) # of the tree built

start_postgres
q postgres "CREATE DATABASE soak" >/dev/null
DATABASE_URL=$(conninfo soak) "$OUTBOXD" migrate >"$WORK/logs/migrate.log" 2>&1 ||
  die "outboxd migrate failed: $(cat "$WORK/logs/migrate.log")"
start_simulator
sim_reset 0
settings=(--set outbox.retention="$retention" --set dlq.retention="$retention"
          --set audit.retention="$retention" --set orders.retention="$retention"
          --set log.level=warn)
start_outboxd soak "${settings[@]}"

if [[ -z "$rate" ]]; then
  log "calibrating: orders through their whole life as fast as they go, ${calibrate_s} s"
  soak calibrate "$OUTBOXD_URL" "$calibrate_s" "$WORK/peak.json"
  peak=$(tool field "$WORK/peak.json" peak_orders_per_s)
  rate=$(awk -v p="$peak" -v f="$fraction" 'BEGIN { r = p * f; printf "%.1f", r < 1 ? 1 : r }')
  log "peak $peak orders/s completed ($(tool field "$WORK/peak.json" created_per_s) created/s); the soak runs at $rate orders/s"
  # The calibration's backlog drains before the clock starts.
  stop_outboxd
  start_outboxd soak "${settings[@]}"
  for _ in $(seq 120); do
    [[ $(q soak "SELECT count(*) FROM outbox_events WHERE status IN ('PENDING', 'PROCESSING')") == 0 ]] && break
    sleep 1
  done
else
  peak=null
fi

log "soak: $rate orders/s for $minutes minute(s), retention $retention"
PSQL="$PG_BIN/psql" SOAK_DB=soak soak run "$OUTBOXD_URL" "$OUTBOXD_PID" "$rate" "$minutes" "$stem.json" \
  2>>"$WORK/logs/soak.log"
# The run's description goes into the same JSON.
"$PYTHON" - "$stem.json" "$peak" "$fraction" "$retention" "$commit" <<'PY'
import json, sys
path, peak, fraction, retention, commit = sys.argv[1:]
d = json.load(open(path))
d["settings"] = {"peak_orders_per_s": json.loads(peak), "fraction": float(fraction),
                 "retention": retention, "commit": commit, "simulator_latency_ms": 0}
json.dump(d, open(path, "w"))
PY
soak report "$stem.json" "$stem.md" "$(dirname "$stem")"
log "written: $stem.json, $stem.md"
