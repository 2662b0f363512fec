#!/usr/bin/env bash
# Availability under slow clients: GET /healthz latency (a steady probe, 50 a second) and order
# intake (POST /api/orders as fast as 8 connections go, one process with processing off) measured
# alone, then while COUNT connections dribble a request
# (a header line every 2 s, never finished; each one cut off is reopened at once), alternating,
# ROUNDS times each. Reports per phase /healthz p50/p99 and orders/s, their ratios loaded /
# unloaded (medians of the rounds), and what happened to the slow connections (cut off with 408,
# refused with 503). See bench/README.md ("Slow clients").
#
#   bench/slow_clients.sh            200 slow connections, 15 s per phase, 3 rounds
#   bench/slow_clients.sh --smoke    50 slow connections, 3 s per phase, 1 round
#   --out FILE                       JSON to FILE and the Markdown next to it (default:
#                                    bench/results/<date>-slow-clients.json and .md)
#
# BENCH_SLOW_COUNT, BENCH_SLOW_SECONDS, BENCH_SLOW_ROUNDS override the sizes; BENCH_SLOW_SETS adds
# key=value options for outboxd (space separated), e.g. "server.threads=8".
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH="$ROOT/bench"
OUTBOXD=${OUTBOXD:-$ROOT/build/release/outboxd}
smoke=0
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --out) out=${2:?--out needs a file}; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "usage: bench/slow_clients.sh [--smoke] [--out FILE]" >&2; exit 2 ;;
  esac
  shift
done
if [[ $smoke == 1 ]]; then d_count=50 d_seconds=3 d_rounds=1; else d_count=200 d_seconds=15 d_rounds=3; fi
COUNT=${BENCH_SLOW_COUNT:-$d_count}
SECONDS_EACH=${BENCH_SLOW_SECONDS:-$d_seconds}
ROUNDS=${BENCH_SLOW_ROUNDS:-$d_rounds}
EXTRA_SETS=${BENCH_SLOW_SETS:-}
INTAKE_CLIENTS=8
PROBE_RATE=50

for t in wrk curl python3; do
  command -v "$t" >/dev/null || { echo "slow_clients: $t is missing (see bench/README.md)" >&2; exit 1; }
done
[[ -x "$OUTBOXD" ]] || { echo "bench/slow_clients.sh: build $OUTBOXD first" >&2; exit 1; }

WORK=$(mktemp -d /tmp/outboxd-slow.XXXXXX)
chmod 755 "$WORK" # the cluster runs as the postgres user when we are root
mkdir -p "$WORK/logs"
RAW="$WORK/raw.jsonl"
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$BENCH/lib/common.sh"
on_exit() {
  local status=$?
  set +e
  stop_pid "${DRIBBLE_PID:-}"
  (exit "$status")
  cleanup
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# measure PHASE ROUND: a steady probe of /healthz (PROBE_RATE a second, like a load balancer's
# health check, on one connection) and wrk on POST /api/orders (INTAKE_CLIENTS connections, as
# fast as they go) at the same time, for SECONDS_EACH.
measure() {
  local phase=$1 round=$2
  "$PYTHON" "$BENCH/lib/probe.py" "$OUTBOXD_URL/healthz" "$PROBE_RATE" "$SECONDS_EACH" \
    >"$WORK/health-$phase-$round.txt" 2>&1 &
  local health_pid=$!
  wrk -t 1 -c "$INTAKE_CLIENTS" -d "${SECONDS_EACH}s" -s "$BENCH/lib/intake.lua" \
    "$OUTBOXD_URL/api/orders" >"$WORK/intake-$phase-$round.txt" 2>&1
  wait "$health_pid"
  local health intake
  health=$(grep '^{' "$WORK/health-$phase-$round.txt" | tail -n 1)
  intake=$(grep '^{' "$WORK/intake-$phase-$round.txt" | tail -n 1)
  [[ -n "$health" && -n "$intake" ]] || die "wrk printed no summary; see $WORK"
  log "$phase round $round: /healthz $(jq_field "$health" p50_ms)/$(jq_field "$health" p99_ms) ms p50/p99, intake $(jq_field "$intake" orders_per_s) orders/s"
  emit kind=phase phase="$phase" round="$round" "health=$health" "intake=$intake"
}
jq_field() { "$PYTHON" -c 'import json, sys; print(round(json.loads(sys.argv[1])[sys.argv[2]], 2))' "$1" "$2"; }

# --- main ----------------------------------------------------------------------------------------
log "$COUNT slow connections, ${SECONDS_EACH}s per phase, $ROUNDS rounds, work folder $WORK"
start_postgres
start_simulator
q postgres "CREATE DATABASE bench" >/dev/null
sets=(--set outbox.enabled=false)
read -r -a extra <<<"$EXTRA_SETS"
for s in "${extra[@]}"; do sets+=(--set "$s"); done
start_outboxd bench "${sets[@]}"
port=${OUTBOXD_URL##*:}
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD 2>/dev/null || commit="$commit+uncommitted changes"
tool meta "$RAW" mode="$([[ $smoke == 1 ]] && echo smoke || echo full)" \
  date="$(date -u +%Y-%m-%dT%H:%M:%SZ)" versions.commit="$commit" \
  versions.outboxd="binary sha256 $(sha256sum "$OUTBOXD" | cut -c1-12)" \
  versions.postgresql="$(q postgres 'SHOW server_version')" versions.cpus="$(nproc)" versions.cpu_model="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)" \
  versions.kernel="$(uname -r)" settings.count="$COUNT" settings.seconds="$SECONDS_EACH" \
  settings.rounds="$ROUNDS" settings.intake_clients="$INTAKE_CLIENTS" settings.probe_rate="$PROBE_RATE" \
  settings.extra_sets="\"$EXTRA_SETS\""

for round in $(seq "$ROUNDS"); do
  measure unloaded "$round"
  "$PYTHON" "$BENCH/lib/dribble.py" 127.0.0.1 "$port" "$COUNT" 2 "$WORK/dribble-$round.json" \
    2>>"$WORK/logs/dribble.log" &
  DRIBBLE_PID=$!
  for _ in $(seq 100); do # until every slow connection is open (10 s)
    sleep 0.1
    [[ -f "$WORK/dribble-$round.json" ]] &&
      [[ $("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["open"])' "$WORK/dribble-$round.json") -ge "$COUNT" ]] && break
  done
  measure slow "$round"
  stop_pid "$DRIBBLE_PID"; DRIBBLE_PID=
  emit kind=dribble round="$round" "x=@$WORK/dribble-$round.json"
done
curl -fsS "$OUTBOXD_URL/metrics" | grep '^outboxd_http_connections_refused_total' >"$WORK/refused.txt" || true

if [[ $smoke == 1 ]]; then json=${out:-$WORK/slow-clients.json}; else json=${out:-$(results_stem slow-clients).json}; fi
mkdir -p "$(dirname "$json")"
"$PYTHON" "$BENCH/lib/scenarios.py" slow-report "$RAW" "$WORK/refused.txt" "$json" "${json%.json}.md"
log "results: $json and ${json%.json}.md"
cat "${json%.json}.md"
