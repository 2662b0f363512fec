#!/usr/bin/env bash
# outboxd's benchmark: intake, drain, wake-up, flat cost, memory, a burst and slow partners
# against their targets and a peer. See bench/README.md.
#
#   bench/run.sh            full run: every figure the median of 3 runs (about 1 hour on 2
#                           busy cores; --slow adds about 45 minutes)
#   bench/run.sh --quick    one run of each, smaller sizes (under 6 minutes without --slow)
#   bench/run.sh --smoke    CI check that the harness works: every measure at a tiny size (about a
#                           minute); writes the JSON to a temporary file (or --out FILE), never
#                           bench/results
#   --slow                  add the slow-partner measure (simulator check, then backlog drains and
#                           a paced load at 100 ms and 20-500 ms per call, concurrency up to 1024)
#   --only LIST             only these measures (comma-separated; BENCH_MEASURES does the same):
#                           intake, memory, drain, flat, wake, burst, slow; e.g. --quick --only drain,slow
#   --out FILE              where the JSON goes (default bench/results/latest.json, plus
#                           bench/results/<date>.md; without every default measure,
#                           <date>-<measures>.md/.json)
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
slow=0
only=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) mode=quick ;;
    --smoke) mode=smoke ;;
    --slow) slow=1 ;;
    --only) only=${2:?--only needs a list of measures}; shift ;;
    --out) out=${2:?--out needs a file}; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "usage: bench/run.sh [--quick|--smoke] [--slow] [--only intake,memory,drain,flat,wake,burst,slow] [--out FILE]" >&2; exit 2 ;;
  esac
  shift
done
# The measures of this run: --only LIST, else BENCH_MEASURES (commas or spaces), else every one
# but slow; --slow adds slow. The smoke run, unless told otherwise, exercises every one (the slow
# partners at a tiny size). "rss" is accepted for memory.
ALL_MEASURES="intake memory drain flat wake burst slow"
DEFAULT_MEASURES="intake memory drain flat wake burst"
chosen=${only:-${BENCH_MEASURES:-}}
if [[ -z "$chosen" ]]; then
  chosen=$DEFAULT_MEASURES
  if [[ $mode == smoke ]]; then chosen+=" slow"; fi
fi
if [[ $slow == 1 ]]; then chosen+=" slow"; fi
MEASURES=" "
for m in ${chosen//,/ }; do
  if [[ $m == rss ]]; then m=memory; fi
  [[ " $ALL_MEASURES " == *" $m "* ]] || { echo "bench: unknown measure $m (known: ${ALL_MEASURES// /, })" >&2; exit 2; }
  [[ "$MEASURES" == *" $m "* ]] || MEASURES+="$m "
done
# measure NAME: whether NAME is among the measures of this run.
measure() { [[ "$MEASURES" == *" $1 "* ]]; }
read -ra MEASURE_LIST <<<"$MEASURES"
# A run without every default measure is partial: it does not replace latest.json.
PARTIAL=""
for m in $DEFAULT_MEASURES; do
  if ! measure "$m"; then PARTIAL=$(IFS=-; echo "${MEASURE_LIST[*]}"); break; fi
done

# --- sizes per mode (every one can be overridden through the environment) -----------------------
case "$mode" in
  full)  d_runs=3 d_intake=10 d_orders=20000 d_history=1000000 d_wake=500 d_lat0="4 16 64" d_lat20="16 64" d_idle=3 d_burst=30000 ;;
  quick) d_runs=1 d_intake=5  d_orders=2000  d_history=100000  d_wake=100 d_lat0="4 16 64" d_lat20="16 64" d_idle=3 d_burst=10000 ;;
  smoke) d_runs=1 d_intake=2  d_orders=100   d_history=0       d_wake=20  d_lat0="4"       d_lat20=""      d_idle=1 d_burst=300 ;;
esac
case "$mode" in # the slow-partner measure
  full)  d_sconc="64 256 1024" d_slat="100 20-500" d_ssecs=20 d_smax=20000 d_spaced=20 d_scheck=8 d_speer=1 ;;
  quick) d_sconc="64 256 1024" d_slat="100 20-500" d_ssecs=20 d_smax=6000  d_spaced=10 d_scheck=5 d_speer=1 ;;
  smoke) d_sconc="4"           d_slat="20-60"      d_ssecs=1  d_smax=20    d_spaced=1  d_scheck=1 d_speer=0 ;;
esac
RUNS=${BENCH_RUNS:-$d_runs}                       # runs per figure (the median is reported)
INTAKE_SECONDS=${BENCH_INTAKE_SECONDS:-$d_intake} # length of each intake measure
INTAKE_CLIENTS=8                                  # concurrent keep-alive clients / pgbench clients
DRAIN_ORDERS=${BENCH_DRAIN_ORDERS:-$d_orders}     # pre-loaded backlog of each drain
CONC_LATENCY0=${BENCH_CONC_LATENCY0:-$d_lat0}     # concurrencies drained with sink latency 0
CONC_LATENCY20=${BENCH_CONC_LATENCY20-$d_lat20}   # ... and with 20 ms per call
LATENCY20=${BENCH_SLOW_LATENCY:-20}               # that latency (ms): another one is reported as such
                                                  # (the slow-partner measure has BENCH_SLOW_LATENCIES)
PROCESSORS=${BENCH_PROCESSORS:-$(nproc)}          # outboxd: a drain at concurrency C runs
                                                  # ceil(C / 16) processors, at most this; C / processors calls each
CALLS_IN_FLIGHT=${BENCH_CALLS_IN_FLIGHT:-16}      # with BENCH_PROCESSORS=0: ceil(C / this)
                                                  # processors instead (0 as well: C processors, for
                                                  # binaries without outbox.callsInFlight)
HISTORY=${BENCH_HISTORY:-$d_history}              # PROCESSED events of the flat-cost drain (0 = skip)
FLAT_CONCURRENCY=${BENCH_FLAT_CONCURRENCY:-16}    # concurrency of the flat-cost drain (latency 0)
WAKE_ORDERS=${BENCH_WAKE_ORDERS:-$d_wake}         # orders of the wake-up measure ...
WAKE_RATE=${BENCH_WAKE_RATE:-50}                  # ... at this rate per second
WAKE_CONCURRENCY=${BENCH_WAKE_CONCURRENCY:-4}     # processors / concurrent jobs while idle
IDLE_SECONDS=${BENCH_IDLE_SECONDS:-$d_idle}       # idle time before the idle RSS is read, and
                                                  # before the wake-up orders start
BURST_ORDERS=${BENCH_BURST_ORDERS:-$d_burst}      # orders of the burst measure (0 = skip)
BURST_POOL=8                                      # outbox.poolSize of the burst measure
SLOW_CONC=${BENCH_SLOW_CONC:-$d_sconc}            # slow partners: concurrencies (calls in flight) ...
SLOW_LATENCIES=${BENCH_SLOW_LATENCIES:-$d_slat}   # ... and latencies per call: MS, or MIN-MAX (uniform)
SLOW_SECONDS=${BENCH_SLOW_SECONDS:-$d_ssecs}      # backlog = this many seconds at the ideal rate ...
SLOW_MAX_ORDERS=${BENCH_SLOW_MAX_ORDERS:-$d_smax} # ... at most this many orders
SLOW_CONNECTIONS=${BENCH_SLOW_CONNECTIONS:-16}    # database connections of either system, in all
SLOW_LOAD=${BENCH_SLOW_LOAD:-0.5}                 # paced load: this share of the ideal rate ...
SLOW_PACED_SECONDS=${BENCH_SLOW_PACED_SECONDS:-$d_spaced} # ... for this long (orders capped as above)
SIMCHECK_SECONDS=${BENCH_SIMCHECK_SECONDS:-$d_scheck} # wrk against the simulator alone, per setting
SLOW_PEER=${BENCH_SLOW_PEER:-$d_speer}            # 0: the slow partners without graphile-worker
SLOW_RUNS=${BENCH_SLOW_RUNS:-$RUNS}               # runs of the slow-partner drains and paced loads
MAX_OTHERS=${BENCH_MAX_OTHERS:-10}                # a drain during which the rest of the machine used
RETRIES=${BENCH_RETRIES:-$([[ $mode == smoke ]] && echo 0 || echo 2)} # more CPU (%) is done again, this often
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
# peer/intake.js (the wake-up orders and the slow partners' paced load) needs bench/peer's pg.
PACED=$([[ -d "$BENCH/peer/node_modules" ]] && echo 1 || echo 0)

WORK=$(mktemp -d /tmp/outboxd-bench.XXXXXX)
chmod 755 "$WORK" # the cluster runs as the postgres user when we are root
mkdir -p "$WORK/logs"
RAW="$WORK/raw.jsonl"
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$BENCH/lib/common.sh"

trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the measures --------------------------------------------------------------------------------

# Templates every run starts from (a fresh copy per run: equal tables, no leftovers).
#   t_empty        migrated, no rows           t_backlog   + DRAIN_ORDERS orders made by the API
#   t_peer_empty   peer schema + graphile       t_peer_backlog  + DRAIN_ORDERS orders with add_job
#   t_flat         HISTORY processed events + audit rows, then the same backlog through the API
#   t_burst        + BURST_ORDERS orders made by the API
# (only those the chosen measures use)
build_templates() {
  log "templates: schema$(measure drain && echo ", $DRAIN_ORDERS-order backlogs")"
  q postgres "CREATE DATABASE t_empty" >/dev/null
  DATABASE_URL=$(conninfo t_empty) "$OUTBOXD" migrate >>"$WORK/logs/outboxd.log" 2>&1 ||
    die "outboxd migrate failed; see $WORK/logs/outboxd.log"
  if measure drain || measure flat; then load_backlog t_backlog t_empty; fi
  if [[ "$PEER" == 1 ]]; then
    q postgres "CREATE DATABASE t_peer_empty" >/dev/null
    psql -X -q -v ON_ERROR_STOP=1 -d t_peer_empty -f "$BENCH/peer/schema.sql" >/dev/null
    PGDATABASE=t_peer_empty node "$BENCH/peer/worker.js" --migrate >>"$WORK/logs/peer.log" 2>&1
    if measure drain; then peer_backlog t_peer_backlog "$DRAIN_ORDERS"; fi
  fi
  if measure burst && [[ "$BURST_ORDERS" -gt 0 ]]; then
    log "templates: $BURST_ORDERS-order backlog of the burst measure"
    fresh_db t_burst t_empty
    start_outboxd t_burst --set outbox.enabled=false
    post_burst "$WORK/burst-load.json"
    stop_outboxd
    q t_burst "VACUUM (ANALYZE)"
  fi
  if [[ "$HISTORY" -gt 0 ]] && measure flat; then
    log "templates: $HISTORY PROCESSED events with their audit rows (flat cost)"
    fresh_db t_flat t_empty
    psql -X -q -v ON_ERROR_STOP=1 -v history="$HISTORY" -d t_flat -f "$BENCH/lib/history.sql" >/dev/null
    load_backlog t_flat
  fi
}

# peer_backlog NAME N: NAME becomes t_peer_empty with N orders, each with its job (add_job).
peer_backlog() {
  fresh_db "$1" t_peer_empty
  PGDATABASE=$1 node "$BENCH/peer/intake.js" backlog "$2" "$INTAKE_CLIENTS" >/dev/null
  q "$1" "VACUUM (ANALYZE)"
}

# slow_template SYSTEM N: sets SLOW_TEMPLATE to a template with an N-order backlog for SYSTEM,
# made on first use (t_slow_N, t_peer_slow_N).
declare -A SLOW_TEMPLATES=()
slow_template() {
  local DRAIN_ORDERS=$2 # load_backlog's size
  if [[ "$1" == outboxd ]]; then SLOW_TEMPLATE=t_slow_$2; else SLOW_TEMPLATE=t_peer_slow_$2; fi
  if [[ -z "${SLOW_TEMPLATES[$SLOW_TEMPLATE]:-}" ]]; then
    log "templates: $SLOW_TEMPLATE ($2 orders)"
    if [[ "$1" == outboxd ]]; then load_backlog "$SLOW_TEMPLATE" t_empty; else peer_backlog "$SLOW_TEMPLATE" "$2"; fi
    SLOW_TEMPLATES[$SLOW_TEMPLATE]=1
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

# startup_cpu SYSTEM CONCURRENCY [CONNECTIONS]: sets STARTUP_SUT and STARTUP_PG, the ticks the
# system and PostgreSQL spend starting it (process start to ready: /readyz for outboxd, "looking
# for jobs" for graphile-worker) with nothing to do, measured once per setting on empty tables.
# A drain's CPU counts from the system's process start, so this is taken off: what is left is the
# work of the drain (node's start-up alone is ~0.4 s of CPU, a sizeable share of a short drain).
declare -A STARTUP=()
startup_cpu() {
  local system=$1 conc=$2 conns=${3:-} key="$1/$2/${3:-}" pg0 sut pg
  if [[ -z "${STARTUP[$key]:-}" ]]; then
    if [[ "$system" == outboxd ]]; then
      fresh_db bench t_empty
      pg0=$(pg_ticks)
      outboxd_sets "$conc" "$conns"
      start_outboxd bench "${OUTBOXD_SETS[@]}"
      sut=$(proc_ticks "$OUTBOXD_PID")
      pg=$(($(pg_ticks) - pg0))
      stop_outboxd
    else
      fresh_db bench t_peer_empty
      pg0=$(pg_ticks)
      start_peer bench "$conc" "$conns"
      sut=$(proc_ticks "$PEER_PID")
      pg=$(($(pg_ticks) - pg0))
      stop_peer
    fi
    STARTUP[$key]="$sut $pg"
  fi
  read -r STARTUP_SUT STARTUP_PG <<<"${STARTUP[$key]}"
}

# drain KIND SYSTEM LATENCY CONCURRENCY TEMPLATE HISTORY RUN [CONNECTIONS]: start SYSTEM on a copy
# of TEMPLATE, time the backlog to all CONFIRMED. The span comes from the database: from the start
# of the first call (the earliest audit row's published_at minus its duration) to the last order's
# CONFIRMED update, so process start-up is not counted for either system. CONCURRENCY is calls in
# flight (outboxd_sets); CONNECTIONS (the slow-partner measure) bounds outboxd's database
# connections (outboxd_sets), or sets the peer's pool. Emits one record of KIND with
# the rate, the CPU per event (system, PostgreSQL, simulator), the peak RSS, threads and database
# connections, and each order's time in flight (first call started -> CONFIRMED).
#
# On a shared machine: a drain during which the rest of the machine used more than MAX_OTHERS % of
# the CPUs is done again after 10 s, up to RETRIES times; the least disturbed attempt counts, and
# its record notes every attempt's share (others_pct_attempts).
drain() {
  local attempt others best=1000
  : >"$WORK/best.json"
  for attempt in $(seq 0 "$RETRIES"); do
    : >"$WORK/attempt.json"
    drain_once "$@"
    others=$(tool field "$WORK/attempt.json" cpu_others_pct)
    echo "$others" >>"$WORK/attempts.txt"
    if awk -v o="$others" -v b="$best" 'BEGIN { exit !(o < b) }'; then
      best=$others
      cp "$WORK/attempt.json" "$WORK/best.json"
    fi
    awk -v o="$others" -v m="$MAX_OTHERS" 'BEGIN { exit !(o > m) }' || break
    [[ $attempt -lt $RETRIES ]] || break
    log "disturbed: the rest of the machine used ${others}% of the CPUs; again in 10 s"
    sleep 10
  done
  tool pick "$WORK/best.json" "$WORK/attempts.txt" >>"$RAW"
  rm -f "$WORK/attempts.txt"
}

drain_once() {
  local kind=$1 system=$2 latency=$3 conc=$4 template=$5 history=$6 run=$7 conns=${8:-}
  local s first audit total span steady rss bad calls pid sut cpu load0 samples="$WORK/samples" procs=null cif=null
  log "drain run $run: $system, latency ${latency} ms, concurrency $conc${conns:+, $conns connections}, history $history ($(cut -d ' ' -f 1-3 /proc/loadavg))"
  startup_cpu "$system" "$conc" "$conns"
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
  : >"$samples"
  load0=$(cut -d ' ' -f 1 /proc/loadavg)
  poll_open
  cpu_begin
  if [[ "$system" == outboxd ]]; then
    outboxd_sets "$conc" "$conns"
    start_outboxd bench "${OUTBOXD_SETS[@]}"
    pid=$OUTBOXD_PID procs=$OUTBOXD_POOL cif=$OUTBOXD_CIF
  else
    start_peer bench "$conc" "$conns"
    pid=$PEER_PID
  fi
  wait_drained "$system" "$pid" "$samples"
  sut=$(proc_ticks "$pid")
  cpu=$(cpu_end "$sut" "$total" "$STARTUP_SUT" "$STARTUP_PG")
  poll_close
  rss=$(rss_mb "$pid" VmHWM)
  if [[ "$system" == outboxd ]]; then stop_outboxd; else stop_peer; fi
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
  # the steady rate: orders CONFIRMED in the middle 80 % of the span, per second of it; it leaves
  # out the ramp-up of the first claims and the tail of the last events in flight, which a finite
  # backlog gives any system
  steady=$(q bench "WITH m AS (SELECT a + (b - a) * 0.1 AS lo, b - (b - a) * 0.1 AS hi
        FROM (SELECT min(published_at - duration_ms * interval '1 ms') AS a FROM ${s}aggregate_results WHERE $audit) x,
             (SELECT max(updated_at) AS b FROM ${s}orders WHERE id >= $first) y)
    SELECT round((count(*) / nullif(extract(epoch FROM max(m.hi) - max(m.lo)), 0))::numeric, 2)
      FROM ${s}orders o, m WHERE o.id >= $first AND o.updated_at >= m.lo AND o.updated_at < m.hi")
  # each order's time in flight: its first call started -> its CONFIRMED update
  q bench "SELECT json_build_object('inflight_p50_ms', round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)),
                                    'inflight_p99_ms', round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)))
             FROM (SELECT extract(epoch FROM o.updated_at - a.started) * 1000 AS ms
                     FROM ${s}orders o
                     JOIN (SELECT aggregate_id, min(published_at - duration_ms * interval '1 ms') AS started
                             FROM ${s}aggregate_results WHERE $audit GROUP BY aggregate_id) a
                       ON a.aggregate_id = o.id::text
                    WHERE o.id >= $first) x" >"$WORK/inflight.json"
  tool samples "$samples" >"$WORK/samples.json"
  # shellcheck disable=SC2086 # cpu is a list of key=value words
  tool emit "$WORK/attempt.json" kind="$kind" system="$system" latency_ms="$latency" concurrency="$conc" history="$history" \
    run="$run" events="$total" seconds="$span" rate="$(awk -v n="$total" -v s="$span" 'BEGIN { printf "%.2f", n / s }')" \
    steady_rate="${steady:-null}" \
    rss_peak_mb="$rss" connections="${conns:-null}" processors="$procs" calls_in_flight_per_processor="$cif" \
    load1_start="$load0" \
    cpu_startup_process_ms="$(awk -v t="$STARTUP_SUT" -v hz="$(getconf CLK_TCK)" 'BEGIN { print t * 1000 / hz }')" \
    $cpu "x=@$WORK/inflight.json" "x=@$WORK/samples.json"
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

# --- slow partners -------------------------------------------------------------------------------

# ideal LATENCY CONCURRENCY: events/s if every call took exactly its latency and nothing else took
# time: concurrency / (4 calls x mean latency).
ideal() { awk -v c="$2" -v m="$(tool latency-mean "$1")" 'BEGIN { printf "%.2f", c / (4 * m / 1000) }'; }

# simcheck LATENCY CONCURRENCY: the simulator alone at the same latency and concurrency: wrk with
# CONCURRENCY keep-alive connections, each sending inventory reservations back to back (as a
# worker would with no database in between). Compared with CONCURRENCY / latency requests/s.
simcheck() {
  local latency=$1 conc=$2 f="$WORK/simcheck.out" s0 s1 b0 a0 b1 a1 load0
  log "simulator check: latency $latency ms, $conc connections, ${SIMCHECK_SECONDS}s ($(cut -d ' ' -f 1-3 /proc/loadavg))"
  sim_reset "$latency"
  load0=$(cut -d ' ' -f 1 /proc/loadavg)
  s0=$(proc_ticks "$SIM_PID")
  read -r b0 a0 < <(machine_ticks)
  wrk -t 2 -c "$conc" -d "${SIMCHECK_SECONDS}s" -s "$BENCH/lib/sim-load.lua" "$SIM_URL" >"$f" 2>&1
  s1=$(proc_ticks "$SIM_PID")
  read -r b1 a1 < <(machine_ticks)
  grep '^{"requests"' "$f" >"$f.json" || die "no summary from wrk: $(cat "$f")"
  emit kind=simcheck latency_ms="$latency" concurrency="$conc" simulator_threads="$SIM_THREADS" \
    ideal_per_s="$(awk -v c="$conc" -v m="$(tool latency-mean "$latency")" 'BEGIN { printf "%.1f", c / (m / 1000) }')" \
    simulator_cpu_ms_per_request="$(awk -v t=$((s1 - s0)) -v f="$f.json" -v hz="$(getconf CLK_TCK)" 'BEGIN {
        getline line < f; match(line, /"requests":[0-9]+/); n = substr(line, RSTART + 11, RLENGTH - 11)
        printf "%.4f", n ? t * 1000 / hz / n : 0 }')" \
    machine_busy_pct="$(awk -v b=$((b1 - b0)) -v a=$((a1 - a0)) 'BEGIN { printf "%.1f", a ? 100 * b / a : 0 }')" \
    load1_start="$load0" "x=@$f.json"
}

# slow_orders LATENCY CONCURRENCY SECONDS: orders for SECONDS at the ideal rate (LOAD share of it),
# rounded up to 100, at most SLOW_MAX_ORDERS.
slow_orders() {
  awk -v r="$(ideal "$1" "$2")" -v t="$3" -v cap="$SLOW_MAX_ORDERS" -v share="${4:-1}" 'BEGIN {
    n = int((r * share * t + 99) / 100) * 100; if (n > cap) n = cap; print n }'
}

# refused SYSTEM CONCURRENCY: true (and prints why) when SYSTEM cannot be configured for it.
refused() {
  [[ "$1" == outboxd ]] || return 1
  local why
  outboxd_sets "$2" "$SLOW_CONNECTIONS"
  why=$("$OUTBOXD" check-config "${OUTBOXD_SETS[@]}" 2>&1 >/dev/null) && return 1
  echo "${why#outboxd: }"
}

# slow_drain SYSTEM LATENCY CONCURRENCY RUN: the backlog drain with slow partners.
slow_drain() {
  local system=$1 latency=$2 conc=$3 run=$4 why
  if why=$(refused "$system" "$conc"); then
    log "slow partners: $system cannot run at concurrency $conc: $why"
    emit kind=slow_drain system="$system" latency_ms="$latency" concurrency="$conc" run="$run" refused="$why"
    return 0
  fi
  slow_template "$system" "$(slow_orders "$latency" "$conc" "$SLOW_SECONDS")"
  drain slow_drain "$system" "$latency" "$conc" "$SLOW_TEMPLATE" 0 "$run" "$SLOW_CONNECTIONS"
}

# slow_paced SYSTEM LATENCY CONCURRENCY RUN: an idle system gets orders at SLOW_LOAD x the ideal
# rate for SLOW_PACED_SECONDS, committed by peer/intake.js (which notes when each COMMIT was
# acknowledged) over enough connections to keep the pace; commit -> CONFIRMED per order.
slow_paced() {
  local system=$1 latency=$2 conc=$3 run=$4 rate n clients s pid load0 procs=null cif=null
  [[ "$PACED" == 1 ]] || return 0
  refused "$system" "$conc" >/dev/null && return 0
  rate=$(awk -v r="$(ideal "$latency" "$conc")" -v l="$SLOW_LOAD" 'BEGIN { printf "%.2f", r * l }')
  n=$(slow_orders "$latency" "$conc" "$SLOW_PACED_SECONDS" "$SLOW_LOAD")
  clients=$(awk -v r="$rate" 'BEGIN { c = int((r + 49) / 50); if (c < 1) c = 1; if (c > 32) c = 32; print c }')
  log "paced load run $run: $system, latency $latency ms, concurrency $conc, $n orders at $rate/s over $clients connections ($(cut -d ' ' -f 1-3 /proc/loadavg))"
  sim_reset "$latency"
  if [[ "$system" == outboxd ]]; then
    s=""
    fresh_db bench t_empty
    outboxd_sets "$conc" "$SLOW_CONNECTIONS"
    start_outboxd bench "${OUTBOXD_SETS[@]}"
    pid=$OUTBOXD_PID procs=$OUTBOXD_POOL cif=$OUTBOXD_CIF
  else
    s="peer."
    fresh_db bench t_peer_empty
    start_peer bench "$conc" "$SLOW_CONNECTIONS"
    pid=$PEER_PID
  fi
  sleep 1
  load0=$(cut -d ' ' -f 1 /proc/loadavg)
  : >"$WORK/samples"
  PGDATABASE=bench node "$BENCH/peer/intake.js" paced "$system" "$n" "$rate" "$clients" >"$WORK/commits.jsonl"
  wait_drained "$system" "$pid" "$WORK/samples"
  q bench "SELECT id, extract(epoch FROM updated_at) * 1000 FROM ${s}orders WHERE order_status = 'CONFIRMED'" >"$WORK/confirmed.txt"
  if [[ "$system" == outboxd ]]; then stop_outboxd; else stop_peer; fi
  tool paced "$WORK/commits.jsonl" "$WORK/confirmed.txt" >"$WORK/paced.json"
  grep -q '"missing": 0,' "$WORK/paced.json" || die "$system: paced orders not CONFIRMED: $(cat "$WORK/paced.json")"
  tool samples "$WORK/samples" >"$WORK/samples.json"
  emit kind=slow_paced system="$system" latency_ms="$latency" concurrency="$conc" run="$run" \
    orders="$n" offered_per_s="$rate" clients="$clients" processors="$procs" \
    calls_in_flight_per_processor="$cif" load1_start="$load0" \
    load1_end="$(cut -d ' ' -f 1 /proc/loadavg)" "x=@$WORK/paced.json" "x=@$WORK/samples.json"
}

# slow_partners: the whole measure.
slow_partners() {
  local conc latency run
  [[ "$SLOW_CONNECTIONS" -ge 4 ]] || die "BENCH_SLOW_CONNECTIONS must be at least 4 (outboxd's listener, API and workers)"
  for latency in $SLOW_LATENCIES; do
    for conc in $SLOW_CONC; do simcheck "$latency" "$conc"; done
  done
  [[ "$PACED" == 1 ]] || log "slow partners: no paced load (peer/intake.js needs npm ci --prefix bench/peer)"
  for run in $(seq "$SLOW_RUNS"); do
    for latency in $SLOW_LATENCIES; do
      for conc in $SLOW_CONC; do
        slow_drain outboxd "$latency" "$conc" "$run"
        if [[ "$PEER$SLOW_PEER" == 11 ]]; then slow_drain peer "$latency" "$conc" "$run"; fi
        slow_paced outboxd "$latency" "$conc" "$run"
        if [[ "$PEER$SLOW_PEER" == 11 ]]; then slow_paced peer "$latency" "$conc" "$run"; fi
      done
    done
  done
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
    settings.processors="$PROCESSORS" settings.calls_in_flight_per_processor="$CALLS_IN_FLIGHT" settings.latency20_ms="$LATENCY20" \
    settings.idle_seconds="$IDLE_SECONDS" settings.peer="$PEER" \
    settings.burst_orders="$BURST_ORDERS" settings.burst_pool_size="$BURST_POOL" \
    settings.fsync="$(q postgres 'SHOW fsync')" settings.synchronous_commit="$(q postgres 'SHOW synchronous_commit')" \
    settings.shared_buffers="$(q postgres 'SHOW shared_buffers')" \
    settings.max_connections="$(q postgres 'SHOW max_connections')" \
    settings.simulator_threads="$SIM_THREADS" settings.peer_pool="\"2 x concurrency + 2\"" settings.poll_interval_ms=2000 \
    settings.measures="\"${MEASURE_LIST[*]}\"" settings.slow_concurrency="\"$SLOW_CONC\"" \
    settings.slow_latencies_ms="\"$SLOW_LATENCIES\"" settings.slow_seconds_at_ideal="$SLOW_SECONDS" \
    settings.slow_max_orders="$SLOW_MAX_ORDERS" settings.slow_connections="$SLOW_CONNECTIONS" \
    settings.slow_paced_load="$SLOW_LOAD" settings.slow_paced_seconds="$SLOW_PACED_SECONDS" \
    settings.simcheck_seconds="$SIMCHECK_SECONDS" settings.slow_peer="$SLOW_PEER" settings.slow_paced="$PACED" settings.slow_runs="$SLOW_RUNS" settings.max_others_pct="$MAX_OTHERS" settings.retries="$RETRIES" settings.load_average_at_start="\"$(cut -d ' ' -f 1-3 /proc/loadavg)\""
}

# --- main ----------------------------------------------------------------------------------------
log "mode $mode: $RUNS run(s) per figure, work folder $WORK"
start_postgres
start_simulator
describe_run
build_templates

if measure intake; then
  for run in $(seq "$RUNS"); do intake "$run"; done
fi
if measure memory; then idle_rss; fi
for run in $(seq "$RUNS"); do
  if measure drain; then
    for conc in $CONC_LATENCY0; do
      drain drain outboxd 0 "$conc" t_backlog 0 "$run"
      if [[ "$PEER" == 1 ]]; then drain drain peer 0 "$conc" t_peer_backlog 0 "$run"; fi
    done
  fi
  if [[ "$HISTORY" -gt 0 ]] && measure flat; then
    # flat cost: compared with the empty-table drain of the same run at the same concurrency
    if ! measure drain || [[ " $CONC_LATENCY0 " != *" $FLAT_CONCURRENCY "* ]]; then
      drain drain outboxd 0 "$FLAT_CONCURRENCY" t_backlog 0 "$run"
    fi
    drain drain outboxd 0 "$FLAT_CONCURRENCY" t_flat "$HISTORY" "$run"
  fi
  if measure drain; then
    for conc in $CONC_LATENCY20; do
      drain drain outboxd "$LATENCY20" "$conc" t_backlog 0 "$run"
      if [[ "$PEER" == 1 ]]; then drain drain peer "$LATENCY20" "$conc" t_peer_backlog 0 "$run"; fi
    done
  fi
  if [[ "$PEER" == 1 && "$WAKE_ORDERS" -gt 0 ]] && measure wake; then
    wake outboxd "$run"
    wake peer "$run"
  fi
  if measure burst && [[ "$BURST_ORDERS" -gt 0 ]]; then burst "$run"; fi
done
if measure slow; then slow_partners; fi

if [[ "$mode" == smoke ]]; then
  json=${out:-$(mktemp "${TMPDIR:-/tmp}/outboxd-bench-smoke.XXXXXX.json")}
  tool report "$RAW" "$json" "${json%.json}.md"
  tool check "$json"
else
  mkdir -p "$BENCH/results"
  day=$(date -u +%Y-%m-%d)
  if [[ -n "$out" ]]; then
    json=$out md="${out%.json}.md"
  elif [[ -n "$PARTIAL" ]]; then # a partial run does not replace latest.json
    json="$BENCH/results/$day-$PARTIAL.json" md="$BENCH/results/$day-$PARTIAL.md"
  else
    json="$BENCH/results/latest.json" md="$BENCH/results/$day.md"
  fi
  mkdir -p "$(dirname "$json")" "$(dirname "$md")"
  tool report "$RAW" "$json" "$md"
  log "results: $json and $md"
  cat "$md"
fi
