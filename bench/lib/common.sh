# shellcheck shell=bash
# Helpers of bench/run.sh (sourced): logging, the throwaway database, and the processes under
# test. Every process started here is remembered by pid and stopped by bench/run.sh's exit trap.
# Expects ROOT, BENCH, WORK, OUTBOXD and RAW to be set by the caller.

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
# The interpreter itself, not a version manager's shim (those cost ~0.5 s per call).
PYTHON=$(python3 -c 'import sys; print(sys.executable)')
tool() { "$PYTHON" "$BENCH/lib/bench.py" "$@"; }
emit() { tool emit "$RAW" "$@"; }

# --- PostgreSQL (a private cluster reached through PGHOST/PGPORT/PGUSER) -------------------------

start_postgres() {
  local conninfo
  conninfo=$("$ROOT/scripts/pg-cluster.sh" start "$WORK/pg")
  PGHOST=$(sed -E 's/.*host=([^ ]+).*/\1/' <<<"$conninfo")
  PGPORT=$(sed -E 's/.*port=([^ ]+).*/\1/' <<<"$conninfo")
  PGUSER=postgres
  export PGHOST PGPORT PGUSER
  PG_STARTED=1
}

stop_postgres() {
  [[ -n "${PG_STARTED:-}" ]] || return 0
  "$ROOT/scripts/pg-cluster.sh" stop "$WORK/pg" immediate || true
  [[ -f "$WORK/pg/socket_dir" ]] && rm -rf "$(cat "$WORK/pg/socket_dir")"
  PG_STARTED=
}

# The client binaries themselves: Debian's /usr/bin/psql is a Perl wrapper that costs ~20 ms of CPU
# per call, which the 4 polls a second of wait_drained would take from the systems under test.
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
psql() { "$PG_BIN/psql" "$@"; }
pgbench() { "$PG_BIN/pgbench" "$@"; }

# q DB SQL: one statement; prints its rows unaligned (no command tags, no notices).
q() { PGOPTIONS='-c client_min_messages=warning' psql -X -q -At -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }
conninfo() { echo "host=$PGHOST port=$PGPORT user=$PGUSER dbname=$1"; }

# fresh_db NAME TEMPLATE: NAME becomes a copy of TEMPLATE (nothing may be connected to either).
fresh_db() {
  q postgres "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null
  q postgres "CREATE DATABASE $1 TEMPLATE $2 STRATEGY FILE_COPY" >/dev/null
}

# --- processes -----------------------------------------------------------------------------------

free_port() { tool ports 1; }

# stop_pid PID: SIGTERM, then SIGKILL after 20 s.
stop_pid() {
  local pid=$1
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 200); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && { log "pid $pid ignored SIGTERM; killing it"; kill -KILL "$pid" 2>/dev/null || true; }
  wait "$pid" 2>/dev/null || true
}

# wait_http URL PID NAME: until URL answers 2xx (60 s), failing early when PID exits.
wait_http() {
  for _ in $(seq 600); do
    curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || die "$3 exited during start-up; see $WORK/logs/$3.log"
    sleep 0.1
  done
  die "$3 did not answer $1 within 60 s; see $WORK/logs/$3.log"
}

# wait_file FILE PID NAME: until FILE exists (a helper writes it once it runs; 30 s), failing early
# when PID exits.
wait_file() {
  for _ in $(seq 300); do
    [[ -f "$1" ]] && return 0
    kill -0 "$2" 2>/dev/null || die "$3 exited during start-up"
    sleep 0.1
  done
  die "$3 did not start within 30 s"
}

# Peak (VmHWM) or current (VmRSS) resident set size of PID in MB.
rss_mb() { awk -v f="$2:" '$1 == f { printf "%.1f\n", $2 / 1024 }' "/proc/$1/status"; }

# The standalone simulator: enough HTTP threads for every keep-alive connection of concurrency 64
# (each connection holds one thread) plus the harness's own requests.
start_simulator() {
  local port
  port=$(free_port)
  "$OUTBOXD" simulator --port "$port" --set server.threads="${BENCH_SIMULATOR_THREADS:-256}" >>"$WORK/logs/simulator.log" 2>&1 &
  SIM_PID=$!
  SIM_URL="http://127.0.0.1:$port"
  wait_http "$SIM_URL/healthz" "$SIM_PID" simulator
}

# sim_reset LATENCY_MS: empty ledger and Idempotency-Key store, no failures, fixed latency.
sim_reset() {
  curl -fsS -o /dev/null -X POST -d '' "$SIM_URL/api/simulator/reset" || die "simulator reset failed"
  curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/json' \
    -d "$(tool sim-config "$1")" "$SIM_URL/api/simulator/config" || die "simulator knobs refused"
}

# start_outboxd DB [--set key=value]...: outboxd serve on a free port, against DB and the
# standalone simulator; returns when /readyz answers.
start_outboxd() {
  local db=$1 port
  shift
  port=$(free_port)
  DATABASE_URL=$(conninfo "$db") "$OUTBOXD" serve --set server.port="$port" \
    --set simulator.enabled=false --set simulator.baseUrl="$SIM_URL" "$@" \
    >>"$WORK/logs/outboxd.log" 2>&1 &
  OUTBOXD_PID=$!
  OUTBOXD_URL="http://127.0.0.1:$port"
  wait_http "$OUTBOXD_URL/readyz" "$OUTBOXD_PID" outboxd
}

stop_outboxd() { stop_pid "${OUTBOXD_PID:-}"; OUTBOXD_PID=; }

# start_peer DB CONCURRENCY: the graphile-worker process; returns once it is looking for jobs.
start_peer() {
  local log="$WORK/logs/peer.log" lines=0
  [[ ! -f "$log" ]] || lines=$(wc -l <"$log")
  PGDATABASE=$1 SIM_URL=$SIM_URL CONCURRENCY=$2 node "$BENCH/peer/worker.js" >>"$log" 2>&1 &
  PEER_PID=$!
  for _ in $(seq 600); do
    tail -n +"$((lines + 1))" "$log" | grep -q 'looking for jobs' && return 0
    kill -0 "$PEER_PID" 2>/dev/null || die "graphile-worker exited during start-up; see $log"
    sleep 0.1
  done
  die "graphile-worker did not start within 60 s; see $log"
}

stop_peer() { stop_pid "${PEER_PID:-}"; PEER_PID=; }

# start_sampler FILE: lib/bench.py samples outboxd's /metrics every second into FILE.
start_sampler() {
  "$PYTHON" "$BENCH/lib/bench.py" sample "$OUTBOXD_URL" "$1" 2>>"$WORK/logs/sampler.log" &
  SAMPLER_PID=$!
}

# stop_sampler: one last scrape, then the sampler ends.
stop_sampler() { stop_pid "${SAMPLER_PID:-}"; SAMPLER_PID=; }

stop_all() {
  stop_sampler
  stop_outboxd
  stop_peer
  stop_pid "${SIM_PID:-}"
  SIM_PID=
}

# The exit trap of run.sh and profile.sh: stops every process and the cluster; removes WORK after
# a success (unless BENCH_KEEP is set), else keeps its logs.
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop_all
  stop_postgres
  if [[ $status -eq 0 && -z "${BENCH_KEEP:-}" ]]; then
    rm -rf "$WORK"
  else
    rm -rf "$WORK/pg"
    log "logs kept in $WORK"
  fi
  exit "$status"
}

# --- backlogs and drains (shared by run.sh and profile.sh) ---------------------------------------

# load_backlog NAME [TEMPLATE]: adds DRAIN_ORDERS orders to NAME (first made a copy of TEMPLATE)
# through POST /api/orders with processing off (outbox.enabled=false), so the backlog is exactly
# what outboxd itself writes.
load_backlog() {
  if [[ -n "${2:-}" ]]; then fresh_db "$1" "$2"; fi
  start_outboxd "$1" --set outbox.enabled=false
  node "$BENCH/lib/post-orders.js" "$OUTBOXD_URL" "$DRAIN_ORDERS" "$INTAKE_CLIENTS" >/dev/null
  stop_outboxd
  [[ $(q "$1" "SELECT count(*) FROM outbox_events WHERE status = 'PENDING'") -eq "$DRAIN_ORDERS" ]] ||
    die "backlog $1 does not hold $DRAIN_ORDERS pending events"
  q "$1" "VACUUM (ANALYZE)"
}

# remaining SYSTEM: orders (and outbox rows / jobs) not finished yet. Cheap with any history: both
# counts use partial or leading-column indexes.
remaining() {
  if [[ "$1" == outboxd ]]; then
    q bench "SELECT (SELECT count(*) FROM orders WHERE order_status = 'PENDING' AND NOT deleted)
                  + (SELECT count(*) FROM outbox_events WHERE status <> 'PROCESSED')"
  else
    q bench "SELECT (SELECT count(*) FROM peer.orders WHERE order_status = 'PENDING' AND NOT deleted)
                  + (SELECT count(*) FROM graphile_worker._private_jobs)"
  fi
}

# wait_drained SYSTEM: polls every 0.25 s; fails when nothing moves for 60 s.
wait_drained() {
  local left last=-1 still=0
  while :; do
    left=$(remaining "$1")
    [[ "$left" -eq 0 ]] && return 0
    if [[ "$left" -eq "$last" ]]; then
      still=$((still + 1))
      [[ $still -lt 240 ]] || die "$1 stopped draining with $left left; see $WORK/logs"
    else
      still=0
      last=$left
    fi
    sleep 0.25
  done
}
