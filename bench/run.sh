#!/usr/bin/env bash
# outboxd's benchmark: intake, drain, wake-up, flat cost and memory against their targets and a
# peer. See bench/README.md.
#
#   bench/run.sh            full run: every figure the median of 3 runs (about 30-40 minutes)
#   bench/run.sh --quick    one run of each, smaller sizes (under 6 minutes)
#   bench/run.sh --smoke    CI check that the harness works: tiny intake + drain (under a minute);
#                           writes the JSON to a temporary file (or --out FILE), never bench/results
#   --out FILE              where the JSON goes (default bench/results/latest.json, plus
#                           bench/results/<date>.md)
#
# It sets up a throwaway PostgreSQL cluster (durable defaults) in a temporary folder, starts the
# standalone simulator, outboxd and graphile-worker as separate processes on free ports, and stops
# all of them on exit. Sizes can be overridden with BENCH_* variables (listed below).
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
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "usage: bench/run.sh [--quick|--smoke] [--out FILE]" >&2; exit 2 ;;
  esac
  shift
done

# --- sizes per mode (every one can be overridden through the environment) -----------------------
case "$mode" in
  full)  d_runs=3 d_intake=10 d_orders=20000 d_history=1000000 d_wake=500 d_lat0="4 16 64" d_lat20="16 64" d_idle=3 d_burst=30000 ;;
  quick) d_runs=1 d_intake=5  d_orders=2000  d_history=100000  d_wake=100 d_lat0="4 16 64" d_lat20="16 64" d_idle=3 d_burst=10000 ;;
  smoke) d_runs=1 d_intake=2  d_orders=100   d_history=0       d_wake=20  d_lat0="4"       d_lat20=""      d_idle=1 d_burst=300 ;;
esac
RUNS=${BENCH_RUNS:-$d_runs}                       # runs per figure (the median is reported)
INTAKE_SECONDS=${BENCH_INTAKE_SECONDS:-$d_intake} # length of each intake measure
INTAKE_CLIENTS=8                                  # concurrent keep-alive clients / pgbench clients
DRAIN_ORDERS=${BENCH_DRAIN_ORDERS:-$d_orders}     # pre-loaded backlog of each drain
CONC_LATENCY0=${BENCH_CONC_LATENCY0:-$d_lat0}     # concurrencies drained with sink latency 0
CONC_LATENCY20=${BENCH_CONC_LATENCY20-$d_lat20}   # ... and with 20 ms per call
SLOW_LATENCY=${BENCH_SLOW_LATENCY:-20}            # that latency (ms): another one is reported as such
CALLS_IN_FLIGHT=${BENCH_CALLS_IN_FLIGHT:-16}      # outboxd: calls in flight per processor; a drain at
                                                  # concurrency C runs ceil(C / this) processors
                                                  # (0: C processors, for binaries without the key)
HISTORY=${BENCH_HISTORY:-$d_history}              # PROCESSED events of the flat-cost drain (0 = skip)
FLAT_CONCURRENCY=${BENCH_FLAT_CONCURRENCY:-16}    # concurrency of the flat-cost drain (latency 0)
WAKE_ORDERS=${BENCH_WAKE_ORDERS:-$d_wake}         # orders of the wake-up measure ...
WAKE_RATE=${BENCH_WAKE_RATE:-50}                  # ... at this rate per second
WAKE_CONCURRENCY=${BENCH_WAKE_CONCURRENCY:-4}     # processors / concurrent jobs while idle
IDLE_SECONDS=${BENCH_IDLE_SECONDS:-$d_idle}       # idle time before the idle RSS is read, and
                                                  # before the wake-up orders start
BURST_ORDERS=${BENCH_BURST_ORDERS:-$d_burst}      # orders of the burst measure (0 = skip)
BURST_POOL=8                                      # outbox.poolSize of the burst measure
MEASURES=${BENCH_MEASURES:-intake rss drain wake burst} # which measures run (the report leaves
                                                  # the others null)
# The peer: on by default; in smoke mode only when bench/peer/node_modules is already installed.
PEER=${BENCH_PEER:-$([[ $mode == smoke ]] && echo auto || echo 1)}

# --- prerequisites -------------------------------------------------------------------------------
missing=()
for t in psql pgbench wrk curl python3 node; do
  command -v "$t" >/dev/null || missing+=("$t")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "bench: missing ${missing[*]} (see bench/README.md: scripts/install-deps.sh, apt-get install wrk)" >&2
  exit 1
fi
if [[ ! -x "$OUTBOXD" ]]; then
  echo "bench: $OUTBOXD is missing; building Release" >&2
  (cd "$ROOT" && cmake --preset release && cmake --build --preset release)
fi
if [[ "$PEER" == auto ]]; then
  if [[ -d "$BENCH/peer/node_modules" ]]; then PEER=1; else PEER=0; fi
fi
if [[ "$PEER" == 1 && ! -d "$BENCH/peer/node_modules" ]]; then
  command -v npm >/dev/null || { echo "bench: npm is missing (needed once for bench/peer)" >&2; exit 1; }
  npm ci --prefix "$BENCH/peer" --no-audit --no-fund >&2
fi

WORK=$(mktemp -d /tmp/outboxd-bench.XXXXXX)
chmod 755 "$WORK" # the cluster runs as the postgres user when we are root
mkdir -p "$WORK/logs"
RAW="$WORK/raw.jsonl"
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$BENCH/lib/common.sh"

trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the measures --------------------------------------------------------------------------------

# wanted MEASURE: whether MEASURE is among those chosen (BENCH_MEASURES).
wanted() { [[ " $MEASURES " == *" $1 "* ]]; }

# Templates every run starts from (a fresh copy per run: equal tables, no leftovers).
#   t_empty        migrated, no rows           t_backlog   + DRAIN_ORDERS orders made by the API
#   t_peer_empty   peer schema + graphile       t_peer_backlog  + DRAIN_ORDERS orders with add_job
#   t_flat         HISTORY processed events + audit rows, then the same backlog through the API
#   t_burst        + BURST_ORDERS orders made by the API
# (only those the chosen measures use)
build_templates() {
  log "templates: schema and backlogs"
  q postgres "CREATE DATABASE t_empty" >/dev/null
  DATABASE_URL=$(conninfo t_empty) "$OUTBOXD" migrate >>"$WORK/logs/outboxd.log" 2>&1 ||
    die "outboxd migrate failed; see $WORK/logs/outboxd.log"
  if wanted drain; then load_backlog t_backlog t_empty; fi
  if [[ "$PEER" == 1 ]]; then
    q postgres "CREATE DATABASE t_peer_empty" >/dev/null
    psql -X -q -v ON_ERROR_STOP=1 -d t_peer_empty -f "$BENCH/peer/schema.sql" >/dev/null
    PGDATABASE=t_peer_empty node "$BENCH/peer/worker.js" --migrate >>"$WORK/logs/peer.log" 2>&1
    if wanted drain; then
      fresh_db t_peer_backlog t_peer_empty
      PGDATABASE=t_peer_backlog node "$BENCH/peer/intake.js" backlog "$DRAIN_ORDERS" "$INTAKE_CLIENTS" >/dev/null
      q t_peer_backlog "VACUUM (ANALYZE)"
    fi
  fi
  if wanted burst && [[ "$BURST_ORDERS" -gt 0 ]]; then
    log "templates: $BURST_ORDERS-order backlog of the burst measure"
    fresh_db t_burst t_empty
    start_outboxd t_burst --set outbox.enabled=false
    post_burst "$WORK/burst-load.json"
    stop_outboxd
    q t_burst "VACUUM (ANALYZE)"
  fi
  if wanted drain && [[ "$HISTORY" -gt 0 ]]; then
    log "templates: $HISTORY PROCESSED events with their audit rows (flat cost)"
    fresh_db t_flat t_empty
    psql -X -q -v ON_ERROR_STOP=1 -v history="$HISTORY" -d t_flat -f "$BENCH/lib/history.sql" >/dev/null
    load_backlog t_flat
  fi
}

# intake RUN: wrk against POST /api/orders (processing off: intake alone), then pgbench with the
# same two-row transaction, then (peer) pgbench with order + add_job; each on fresh tables.
intake() {
  local run=$1 f="$WORK/intake.out"
  log "intake run $run: $INTAKE_CLIENTS clients, ${INTAKE_SECONDS}s each"
  fresh_db bench t_empty
  start_outboxd bench --set outbox.enabled=false
  wrk -t 2 -c "$INTAKE_CLIENTS" -d "${INTAKE_SECONDS}s" -s "$BENCH/lib/intake.lua" \
    "$OUTBOXD_URL/api/orders" >"$f"
  stop_outboxd
  grep '^{"requests"' "$f" >"$f.json" || die "no summary from wrk: $(cat "$f")"
  grep -q '"non2xx":0,' "$f.json" || die "outboxd refused orders during the intake measure: $(cat "$f.json")"
  emit kind=intake_http run="$run" "x=@$f.json"

  fresh_db bench t_empty
  pgbench -n -M prepared -c "$INTAKE_CLIENTS" -j 2 -T "$INTAKE_SECONDS" \
    -f "$BENCH/lib/intake-outboxd.sql" bench >"$f" 2>&1 || die "pgbench failed: $(tail -n 5 "$f")"
  emit kind=intake_pgbench system=outboxd run="$run" tps="$(tool pgbench-tps "$f")"

  if [[ "$PEER" == 1 ]]; then
    fresh_db bench t_peer_empty
    pgbench -n -M prepared -c "$INTAKE_CLIENTS" -j 2 -T "$INTAKE_SECONDS" \
      -f "$BENCH/lib/intake-peer.sql" bench >"$f" 2>&1 || die "pgbench (peer) failed: $(tail -n 5 "$f")"
    emit kind=intake_pgbench system=peer run="$run" tps="$(tool pgbench-tps "$f")"
  fi
}

# idle_rss: peak RSS after start-up and IDLE_SECONDS of nothing to do, at WAKE_CONCURRENCY.
idle_rss() {
  log "memory: idle RSS after ${IDLE_SECONDS}s"
  fresh_db bench t_empty
  start_outboxd bench --set outbox.poolSize="$WAKE_CONCURRENCY"
  sleep "$IDLE_SECONDS"
  emit kind=rss_idle system=outboxd mb="$(rss_mb "$OUTBOXD_PID" VmHWM)"
  stop_outboxd
  if [[ "$PEER" == 1 ]]; then
    fresh_db bench t_peer_empty
    start_peer bench "$WAKE_CONCURRENCY"
    sleep "$IDLE_SECONDS"
    emit kind=rss_idle system=peer mb="$(rss_mb "$PEER_PID" VmHWM)"
    stop_peer
  fi
}

# drain SYSTEM LATENCY_MS CONCURRENCY TEMPLATE HISTORY RUN: start SYSTEM on a copy of TEMPLATE,
# time the backlog to all CONFIRMED. The span comes from the database: from the start of the first
# call (the earliest audit row's published_at minus its duration) to the last order's CONFIRMED
# update, so process start-up is not counted for either system.
drain() {
  local system=$1 latency=$2 conc=$3 template=$4 history=$5 run=$6 s first audit total span rss bad calls
  log "drain run $run: $system, latency ${latency} ms, concurrency $conc, history $history"
  fresh_db bench "$template"
  sim_reset "$latency"
  if [[ "$system" == outboxd ]]; then
    s=""
    # audit rows of this drain only (the flat-cost history has its own, older ones)
    audit="event_id >= $(q bench "SELECT min(id) FROM outbox_events WHERE status = 'PENDING'")"
  else
    s="peer."
    audit="true"
  fi
  first=$(q bench "SELECT min(id) FROM ${s}orders WHERE order_status = 'PENDING'")
  total=$(q bench "SELECT count(*) FROM ${s}orders WHERE order_status = 'PENDING'")
  if [[ "$system" == outboxd ]]; then
    if [[ "$CALLS_IN_FLIGHT" -gt 0 ]]; then
      # concurrency = calls in flight: as few processors (threads) as carry them
      local pool=$(( (conc + CALLS_IN_FLIGHT - 1) / CALLS_IN_FLIGHT ))
      start_outboxd bench --set outbox.poolSize="$pool" --set outbox.callsInFlight="$(( (conc + pool - 1) / pool ))"
    else # a binary from before outbox.callsInFlight: one processor per call in flight
      start_outboxd bench --set outbox.poolSize="$conc"
    fi
    wait_drained outboxd
    rss=$(rss_mb "$OUTBOXD_PID" VmHWM)
    stop_outboxd
  else
    start_peer bench "$conc"
    wait_drained peer
    rss=$(rss_mb "$PEER_PID" VmHWM)
    stop_peer
  fi
  bad=$(q bench "SELECT count(*) FROM ${s}orders WHERE id >= $first AND order_status <> 'CONFIRMED'")
  [[ "$bad" -eq 0 ]] || die "$system: $bad orders did not end CONFIRMED"
  # Every order's 4 steps succeeded. outboxd must have exactly one success row per step; the peer
  # is at-least-once (a job that failed mid-way, e.g. on a keep-alive socket the simulator had
  # just closed, runs again from its first call), so it is held to each step succeeding.
  if [[ "$system" == outboxd ]]; then
    calls=$(q bench "SELECT count(*) FROM aggregate_results WHERE $audit AND outcome = 'success'")
  else
    calls=$(q bench "SELECT count(DISTINCT (aggregate_id, destination)) FROM peer.aggregate_results
                      WHERE outcome = 'success'")
  fi
  [[ "$calls" -eq $((4 * total)) ]] || die "$system: $calls successful steps recorded for $total orders (expected 4 each)"
  span=$(q bench "SELECT extract(epoch FROM
      (SELECT max(updated_at) FROM ${s}orders WHERE id >= $first)
    - (SELECT min(published_at - duration_ms * interval '1 ms') FROM ${s}aggregate_results WHERE $audit))")
  emit kind=drain system="$system" latency_ms="$latency" concurrency="$conc" history="$history" \
    run="$run" events="$total" seconds="$span" rate="$(awk -v n="$total" -v s="$span" 'BEGIN { printf "%.2f", n / s }')" \
    rss_peak_mb="$rss"
}

# wake SYSTEM RUN: an idle system gets WAKE_ORDERS orders at WAKE_RATE/s, each committed by
# bench/peer/intake.js, which notes when COMMIT was acknowledged; the simulator's ledger notes when
# each order's first call (inventory.reserve) arrived.
wake() {
  local system=$1 run=$2
  log "wake-up run $run: $system, $WAKE_ORDERS orders at $WAKE_RATE/s"
  sim_reset 0
  if [[ "$system" == outboxd ]]; then
    fresh_db bench t_empty
    start_outboxd bench --set outbox.poolSize="$WAKE_CONCURRENCY"
  else
    fresh_db bench t_peer_empty
    start_peer bench "$WAKE_CONCURRENCY"
  fi
  sleep "$IDLE_SECONDS" # idle: listeners connected, nothing to do
  PGDATABASE=bench node "$BENCH/peer/intake.js" wake "$system" "$WAKE_ORDERS" "$WAKE_RATE" >"$WORK/commits.jsonl"
  wait_drained "$system"
  curl -fsS "$SIM_URL/api/simulator/ledger" >"$WORK/ledger.json"
  if [[ "$system" == outboxd ]]; then stop_outboxd; else stop_peer; fi
  tool wake "$WORK/ledger.json" "$WORK/commits.jsonl" >"$WORK/wake.json"
  grep -q '"missing": 0,' "$WORK/wake.json" || die "$system: orders without a simulator call: $(cat "$WORK/wake.json")"
  emit kind=wake system="$system" run="$run" "x=@$WORK/wake.json"
}

# post_burst OUT: BURST_ORDERS orders through POST /api/orders of the running outboxd, as fast as
# INTAKE_CLIENTS keep-alive connections go (one wrk thread drives them all; lib/burst.lua).
post_burst() {
  BURST_ORDERS=$BURST_ORDERS wrk -t 1 -c "$INTAKE_CLIENTS" -d "$((BURST_ORDERS / 20 + 120))s" \
    -s "$BENCH/lib/burst.lua" "$OUTBOXD_URL/api/orders" >"$1.out"
  grep '^{"posted"' "$1.out" >"$1" || die "no summary from wrk: $(cat "$1.out")"
  grep -q "\"answered\":$BURST_ORDERS,\"refused\":0}" "$1" ||
    die "not every burst order was answered 201: $(cat "$1")"
}

# burst RUN: outboxd (outbox.poolSize=BURST_POOL, otherwise the defaults) first drains
# BURST_ORDERS pre-loaded orders (t_burst), the reference. Then, idle, on the statistics of a
# quiet system (VACUUM ANALYZE: what autovacuum does once nothing is pending), the same process
# gets BURST_ORDERS more from post_burst and drains them as they come. lib/bench.py samples
# /metrics every second (intake, drain, claim times); the spans come from the database.
burst() {
  local run=$1 start pre fig orders events
  log "burst run $run: $BURST_ORDERS orders pre-loaded, drained at pool size $BURST_POOL"
  fresh_db bench t_burst
  sim_reset 0
  start=$(date +%s.%N)
  start_outboxd bench --set outbox.poolSize="$BURST_POOL"
  start_sampler "$WORK/preloaded.jsonl"
  wait_drained outboxd
  stop_sampler
  check_burst_drained
  # from the start of the first call to the last event processed, as the drain measure
  pre=$(q bench "SELECT format('events=%s seconds=%s', count(*), extract(epoch FROM
      max(processed_at) - (SELECT min(published_at - duration_ms * interval '1 ms') FROM aggregate_results)))
    FROM outbox_events")
  tool burst "$WORK/preloaded.jsonl" "$start" baseline=zero $pre >"$WORK/preloaded.json"
  rm -f "$WORK/preloaded.jsonl"

  log "burst run $run: $BURST_ORDERS more posted by $INTAKE_CLIENTS connections while it drains"
  q bench "VACUUM (ANALYZE)"
  orders=$(q bench "SELECT max(id) FROM orders")
  events=$(q bench "SELECT max(id) FROM outbox_events")
  start_sampler "$WORK/burst.jsonl"
  for _ in $(seq 50); do [[ -s "$WORK/burst.jsonl" ]] && break; sleep 0.1; done # the baseline
  start=$(date +%s.%N)
  post_burst "$WORK/burst-post.json"
  wait_drained outboxd
  stop_sampler
  stop_outboxd
  check_burst_drained
  # the burst's orders: intake from the first one's to the last one's commit; the drain during
  # the intake, and after it up to the last event processed
  fig=$(q bench "WITH o AS (SELECT min(created_at) AS first, max(created_at) AS last FROM orders
                            WHERE id > $orders),
                     e AS (SELECT * FROM outbox_events WHERE id > $events)
    SELECT format('orders=%s intake_seconds=%s during_events=%s after_seconds=%s',
      (SELECT count(*) FROM e), extract(epoch FROM o.last - o.first),
      (SELECT count(*) FROM e WHERE processed_at <= o.last),
      extract(epoch FROM (SELECT max(processed_at) FROM e) - o.last))
    FROM o")
  tool burst "$WORK/burst.jsonl" "$start" baseline=first $fig >"$WORK/burst.json"
  rm -f "$WORK/burst.jsonl"
  emit kind=burst run="$run" "burst=@$WORK/burst.json" "preloaded=@$WORK/preloaded.json"
}

# check_burst_drained: every order of the bench database CONFIRMED with 4 successful calls.
check_burst_drained() {
  local total bad calls
  total=$(q bench "SELECT count(*) FROM orders")
  bad=$(q bench "SELECT count(*) FROM orders WHERE order_status <> 'CONFIRMED'")
  [[ "$bad" -eq 0 ]] || die "burst: $bad of $total orders did not end CONFIRMED"
  calls=$(q bench "SELECT count(*) FROM aggregate_results WHERE outcome = 'success'")
  [[ "$calls" -eq $((4 * total)) ]] || die "burst: $calls successful steps recorded for $total orders (expected 4 each)"
}

describe_run() {
  local graphile="not run" commit
  if [[ "$PEER" == 1 ]]; then
    graphile=$(sed -nE 's/^  "version": "([^"]+)".*/\1/p' "$BENCH/peer/node_modules/graphile-worker/package.json")
  fi
  commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD 2>/dev/null || commit="$commit+uncommitted changes"
  tool meta "$RAW" mode="$mode" date="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    versions.commit="$commit" versions.outboxd="binary sha256 $(sha256sum "$OUTBOXD" | cut -c1-12)" \
    versions.postgresql="$(q postgres 'SHOW server_version')" versions.pgbench="$(pgbench --version | awk '{print $3}')" \
    versions.wrk="$(wrk --version 2>&1 | head -n 1 | awk '{print $2}')" \
    versions.node="$(node --version)" versions.graphile_worker="$graphile" \
    versions.cpus="$(nproc)" versions.cpu_model="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)" \
    versions.kernel="$(uname -r)" \
    settings.runs="$RUNS" settings.intake_seconds="$INTAKE_SECONDS" settings.intake_clients="$INTAKE_CLIENTS" \
    settings.drain_orders="$DRAIN_ORDERS" settings.concurrency_latency0="\"$CONC_LATENCY0\"" \
    settings.concurrency_latency20="\"$CONC_LATENCY20\"" settings.flat_history_events="$HISTORY" \
    settings.flat_concurrency="$FLAT_CONCURRENCY" settings.wake_orders="$WAKE_ORDERS" \
    settings.wake_rate="$WAKE_RATE" settings.wake_concurrency="$WAKE_CONCURRENCY" \
    settings.calls_in_flight_per_processor="$CALLS_IN_FLIGHT" settings.slow_latency_ms="$SLOW_LATENCY" \
    settings.idle_seconds="$IDLE_SECONDS" settings.peer="$PEER" \
    settings.burst_orders="$BURST_ORDERS" settings.burst_pool_size="$BURST_POOL" \
    settings.fsync="$(q postgres 'SHOW fsync')" settings.synchronous_commit="$(q postgres 'SHOW synchronous_commit')" \
    settings.shared_buffers="$(q postgres 'SHOW shared_buffers')" \
    settings.max_connections="$(q postgres 'SHOW max_connections')" \
    settings.simulator_threads=256 settings.peer_pool="\"2 x concurrency + 2\"" settings.poll_interval_ms=2000
}

# --- main ----------------------------------------------------------------------------------------
log "mode $mode: $RUNS run(s) per figure, work folder $WORK"
start_postgres
start_simulator
describe_run
build_templates

if wanted intake; then for run in $(seq "$RUNS"); do intake "$run"; done; fi
if wanted rss; then idle_rss; fi
for run in $(seq "$RUNS"); do
  wanted drain || CONC_LATENCY0="" CONC_LATENCY20="" HISTORY=0
  for conc in $CONC_LATENCY0; do
    drain outboxd 0 "$conc" t_backlog 0 "$run"
    if [[ "$PEER" == 1 ]]; then drain peer 0 "$conc" t_peer_backlog 0 "$run"; fi
  done
  if [[ "$HISTORY" -gt 0 ]]; then
    # flat cost: compared with the empty-table drain of the same run at the same concurrency
    if [[ " $CONC_LATENCY0 " != *" $FLAT_CONCURRENCY "* ]]; then
      drain outboxd 0 "$FLAT_CONCURRENCY" t_backlog 0 "$run"
    fi
    drain outboxd 0 "$FLAT_CONCURRENCY" t_flat "$HISTORY" "$run"
  fi
  for conc in $CONC_LATENCY20; do
    drain outboxd "$SLOW_LATENCY" "$conc" t_backlog 0 "$run"
    if [[ "$PEER" == 1 ]]; then drain peer "$SLOW_LATENCY" "$conc" t_peer_backlog 0 "$run"; fi
  done
  if wanted wake && [[ "$PEER" == 1 && "$WAKE_ORDERS" -gt 0 ]]; then
    wake outboxd "$run"
    wake peer "$run"
  fi
  if wanted burst && [[ "$BURST_ORDERS" -gt 0 ]]; then burst "$run"; fi
done

if [[ "$mode" == smoke ]]; then
  json=${out:-$(mktemp /tmp/outboxd-bench-smoke.XXXXXX.json)}
  tool report "$RAW" "$json" "${json%.json}.md"
  tool check "$json"
else
  mkdir -p "$BENCH/results"
  json=${out:-$BENCH/results/latest.json}
  if [[ -n "$out" ]]; then md="${out%.json}.md"; else md="$BENCH/results/$(date -u +%Y-%m-%d).md"; fi
  tool report "$RAW" "$json" "$md"
  log "results: $json and $md"
  cat "$md"
fi
