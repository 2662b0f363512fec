#!/usr/bin/env bash
# outboxd's memory while every destination answers with gigabytes: 8 workers calling a server
# that streams 1 GiB bodies (or chunked bodies without end, or a trickle), next to a normal drain.
# See bench/README.md ("Hostile destinations").
#
#   bench/hostile_rss.sh           full: 30 s per kind of answer (fast, chunked, trickle) + baseline
#   bench/hostile_rss.sh --quick   10 s each
#   bench/hostile_rss.sh --smoke   3 s, fast answers and the baseline: does the harness work
#   --out FILE                     JSON to FILE and the Markdown next to it (default: full and
#                                  quick runs write bench/results/<date>-hostile-rss.json and .md;
#                                  smoke a temporary file)
#
# Sizes can be overridden: BENCH_HOSTILE_SECONDS, BENCH_HOSTILE_ORDERS (the backlog),
# BENCH_HOSTILE_KINDS ("fast chunked trickle"), BENCH_HOSTILE_GB (1), BENCH_HOSTILE_POOL (8),
# BENCH_HOSTILE_INTERVAL (0.2 s between RSS samples), BENCH_HOSTILE_SETS (extra key=value options
# for outboxd, space separated).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH="$ROOT/bench"
OUTBOXD=${OUTBOXD:-$ROOT/build/release/outboxd}

mode=full
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) mode=quick ;;
    --smoke) mode=smoke ;;
    --out) out=${2:?--out needs a file}; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "usage: bench/hostile_rss.sh [--quick|--smoke] [--out FILE]" >&2; exit 2 ;;
  esac
  shift
done

case "$mode" in
  full)  d_seconds=30 d_orders=3000 d_kinds="fast chunked trickle" ;;
  quick) d_seconds=10 d_orders=1000 d_kinds="fast chunked trickle" ;;
  smoke) d_seconds=3  d_orders=100  d_kinds="fast" ;;
esac
SECONDS_EACH=${BENCH_HOSTILE_SECONDS:-$d_seconds} # each run drains for this long (or until done)
DRAIN_ORDERS=${BENCH_HOSTILE_ORDERS:-$d_orders}   # the backlog every run starts from
KINDS=${BENCH_HOSTILE_KINDS:-$d_kinds}            # hostile answers, one run each
GIGABYTES=${BENCH_HOSTILE_GB:-1}                  # announced / streamed body size
POOL=${BENCH_HOSTILE_POOL:-8}                     # outbox.poolSize: calls in flight at once
INTERVAL=${BENCH_HOSTILE_INTERVAL:-0.2}           # seconds between RSS samples
EXTRA_SETS=${BENCH_HOSTILE_SETS:-}
INTAKE_CLIENTS=8                                  # load_backlog's connections

for t in psql curl python3 node; do
  command -v "$t" >/dev/null || { echo "hostile_rss: $t is missing (see bench/README.md)" >&2; exit 1; }
done
if [[ ! -x "$OUTBOXD" ]]; then
  echo "hostile_rss: $OUTBOXD is missing; building Release" >&2
  (cd "$ROOT" && cmake --preset release && cmake --build --preset release -j 2)
fi

WORK=$(mktemp -d /tmp/outboxd-hostile.XXXXXX)
chmod 755 "$WORK" # the cluster runs as the postgres user when we are root
mkdir -p "$WORK/logs"
RAW="$WORK/raw.jsonl"
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$BENCH/lib/common.sh"
scen() { "$PYTHON" "$BENCH/lib/scenarios.py" "$@"; }

stop_run_helpers() {
  stop_pid "${SAMPLER_PID:-}"; SAMPLER_PID=
  stop_pid "${HOSTILE_PID:-}"; HOSTILE_PID=
}
on_exit() {
  local status=$?
  set +e # (exit "$status") below hands the status to cleanup; with errexit it would end the trap
  stop_run_helpers
  (exit "$status")
  cleanup
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# wait_port PORT PID NAME: until something listens on 127.0.0.1:PORT (any request there would be
# answered with a gigabyte, so no HTTP probe).
wait_port() {
  for _ in $(seq 300); do
    "$PYTHON" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$1" \
      2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || die "$3 exited during start-up; see $WORK/logs/$3.log"
    sleep 0.1
  done
  die "$3 did not listen on port $1 within 30 s"
}

# run NAME: drain a copy of the backlog for SECONDS_EACH (or until done) against the simulator
# (NAME baseline) or a hostile server of kind NAME, sampling outboxd's memory.
run() {
  local name=$1 base port left t_end extra=()
  local -a sets
  read -r -a sets <<<"$EXTRA_SETS"
  for s in "${sets[@]}"; do extra+=(--set "$s"); done
  fresh_db bench t_backlog
  if [[ "$name" == baseline ]]; then
    sim_reset 0
    base=$SIM_URL
  else
    port=$(free_port)
    "$PYTHON" "$BENCH/lib/hostile_server.py" --port "$port" --kind "$name" --gigabytes "$GIGABYTES" \
      --stats "$WORK/server-$name.json" >>"$WORK/logs/hostile-$name.log" 2>&1 &
    HOSTILE_PID=$!
    wait_port "$port" "$HOSTILE_PID" "hostile-$name"
    base="http://127.0.0.1:$port"
  fi
  log "run $name: $DRAIN_ORDERS orders, poolSize $POOL, every route at $base, ${SECONDS_EACH}s at most"
  start_outboxd bench --set simulator.baseUrl="$base" --set outbox.poolSize="$POOL" "${extra[@]}"
  "$PYTHON" "$BENCH/lib/scenarios.py" rss "$OUTBOXD_PID" "$INTERVAL" "$WORK/rss-$name.json" \
    2>>"$WORK/logs/rss.log" &
  SAMPLER_PID=$!
  wait_file "$WORK/rss-$name.json" "$SAMPLER_PID" "RSS sampler"
  t_end=$(( $(date +%s) + SECONDS_EACH ))
  while [[ $(date +%s) -lt $t_end ]]; do
    sleep 0.5
    left=$(q bench "SELECT (SELECT count(*) FROM outbox_events WHERE status IN ('PENDING', 'PROCESSING'))
                         + (SELECT count(*) FROM dead_letter_events WHERE status IN ('PENDING', 'PROCESSING'))")
    [[ "$left" -eq 0 ]] && break
  done
  stop_pid "$SAMPLER_PID"; SAMPLER_PID=
  stop_outboxd
  if [[ "$name" == baseline ]]; then
    echo '{}' >"$WORK/server-$name.json"
  else
    stop_pid "$HOSTILE_PID"; HOSTILE_PID=
  fi
  q bench "SELECT json_build_object(
      'attempts', count(*),
      'truncated', count(*) FILTER (WHERE response_truncated),
      'by_outcome', (SELECT json_object_agg(outcome, n) FROM
                      (SELECT outcome, count(*) AS n FROM aggregate_results GROUP BY 1) x),
      'largest_body_bytes', max(greatest(octet_length(response_body), octet_length(response_text),
                                         octet_length(response_payload::text))),
      'orders_done', (SELECT count(*) FROM orders WHERE order_status <> 'PENDING'),
      'orders_by_status', (SELECT json_object_agg(order_status, n) FROM
                            (SELECT order_status, count(*) AS n FROM orders GROUP BY 1) x),
      'events_unfinished', (SELECT count(*) FROM outbox_events WHERE status IN ('PENDING', 'PROCESSING')))
    FROM aggregate_results" >"$WORK/db-$name.json"
  "$PYTHON" - "$WORK" "$name" <<'EOF'
import json, sys
work, name = sys.argv[1:]
r = {k: json.load(open(f"{work}/{k}-{name}.json")) for k in ("rss", "db", "server")}
if name == "baseline":
    r["server"] = {"requests": r["db"]["attempts"]}
json.dump(r, open(f"{work}/run-{name}.json", "w"))
print(f"peak RSS {r['rss']['rss_peak_sampled_mb']} MB sampled, VmHWM {r['rss']['vm_hwm_mb']} MB; "
      f"{r['server'].get('requests')} calls ({r['server'].get('max_in_flight', '-')} at once at most), "
      f"{r['db']['truncated']} of {r['db']['attempts']} attempt rows truncated", file=sys.stderr)
EOF
  emit kind=hostile name="$name" "x=@$WORK/run-$name.json"
}

# --- main ----------------------------------------------------------------------------------------
log "mode $mode: kinds '$KINDS' + baseline, ${SECONDS_EACH}s each, $DRAIN_ORDERS orders, work folder $WORK"
start_postgres
start_simulator
q postgres "CREATE DATABASE t_empty" >/dev/null
DATABASE_URL=$(conninfo t_empty) "$OUTBOXD" migrate >>"$WORK/logs/outboxd.log" 2>&1 ||
  die "outboxd migrate failed; see $WORK/logs/outboxd.log"
load_backlog t_backlog t_empty
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD 2>/dev/null || commit="$commit+uncommitted changes"
tool meta "$RAW" mode="$mode" date="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  versions.commit="$commit" versions.outboxd="binary sha256 $(sha256sum "$OUTBOXD" | cut -c1-12)" \
  versions.postgresql="$(q postgres 'SHOW server_version')" versions.cpus="$(nproc)" \
  versions.cpu_model="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)" \
  versions.kernel="$(uname -r)" versions.load_average="$(cut -d' ' -f1-3 /proc/loadavg)" settings.seconds="$SECONDS_EACH" settings.orders="$DRAIN_ORDERS" \
  settings.kinds="\"$KINDS\"" settings.gigabytes="$GIGABYTES" settings.pool="$POOL" \
  settings.interval_s="$INTERVAL" settings.extra_sets="\"$EXTRA_SETS\""

run baseline
for k in $KINDS; do run "$k"; done

if [[ "$mode" == smoke ]]; then
  json=${out:-$(mktemp "${TMPDIR:-/tmp}/outboxd-hostile-smoke.XXXXXX.json")}
else
  mkdir -p "$BENCH/results"
  json=${out:-$BENCH/results/$(date -u +%Y-%m-%d)-hostile-rss.json}
fi
md="${json%.json}.md"
scen hostile-report "$RAW" "$json" "$md"
log "results: $json and $md"
cat "$md"
if [[ "$mode" == smoke ]]; then
  first=${KINDS%% *}
  scen check "$json" rss_peak_baseline_mb rss_peak_hostile_mb "runs.$first.server.requests" \
    "runs.$first.db.truncated" "runs.$first.rss.rss_peak_sampled_mb"
fi
