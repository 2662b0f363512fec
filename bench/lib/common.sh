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
# per call, which the 2 polls a second of wait_drained would take from the systems under test.
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

# results_stem NAME: where a script's results go: bench/results/<UTC date>-NAME, or, for a smoke
# run (smoke=1), WORK/NAME (removed with WORK).
results_stem() {
  if [[ ${smoke:-0} == 1 ]]; then echo "$WORK/$1"; else echo "$BENCH/results/$(date -u +%F)-$1"; fi
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

# The standalone simulator: SIM_THREADS HTTP threads (BENCH_SIMULATOR_THREADS, default 32 as
# server.threads: a call waiting out its simulated latency holds none, so they need not grow with
# the calls in flight).
start_simulator() {
  local port
  port=$(free_port)
  SIM_THREADS=${SIM_THREADS:-${BENCH_SIMULATOR_THREADS:-32}}
  # Every call outboxd keeps in flight holds a connection from 127.0.0.1: no cap on connections.
  # BENCH_SIMULATOR_BINARY: another binary's simulator (this one's, to measure an older outboxd).
  "${BENCH_SIMULATOR_BINARY:-$OUTBOXD}" simulator --port "$port" --set server.threads="$SIM_THREADS" \
    --set server.maxConnections=100000 --set server.maxConnectionsPerClient=100000 \
    >>"$WORK/logs/simulator.log" 2>&1 &
  SIM_PID=$!
  SIM_URL="http://127.0.0.1:$port"
  wait_http "$SIM_URL/healthz" "$SIM_PID" simulator
}

# sim_reset LATENCY: empty ledger and Idempotency-Key store, no failures, and every call waiting
# LATENCY ms, or "MIN-MAX": uniformly spread over [MIN, MAX] ms (the knob latencyMs: [min, max]).
sim_reset() {
  curl -fsS -o /dev/null -X POST -H 'Content-Type: application/json' "$SIM_URL/api/simulator/reset" || die "simulator reset failed"
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

# start_peer DB CONCURRENCY [POOL]: the graphile-worker process (POOL database connections,
# default 2 x CONCURRENCY + 2); returns once it is looking for jobs.
start_peer() {
  local log="$WORK/logs/peer.log" lines=0
  [[ ! -f "$log" ]] || lines=$(wc -l <"$log")
  PGDATABASE=$1 SIM_URL=$SIM_URL CONCURRENCY=$2 POOL_MAX=${3:-} node "$BENCH/peer/worker.js" >>"$log" 2>&1 &
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
# a success (unless BENCH_KEEP is set), else keeps its logs (PostgreSQL's among them).
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop_all
  stop_postgres
  if [[ $status -eq 0 && -z "${BENCH_KEEP:-}" ]]; then
    rm -rf "$WORK"
  else
    cp "$WORK/pg/server.log" "$WORK/logs/postgresql.log" 2>/dev/null || true
    rm -rf "$WORK/pg"
    log "logs kept in $WORK"
  fi
  exit "$status"
}

# --- CPU accounting -----------------------------------------------------------------------------
# Clock ticks (getconf CLK_TCK, 100 a second) of user + system time, read from /proc.

# proc_ticks PID: what the process (every thread of it) used so far; 0 when it is gone.
proc_ticks() {
  awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# pg_ticks: what the bench cluster used so far: the postmaster itself, the children it has reaped
# (cutime + cstime: backends that ended, e.g. the harness's psql sessions) and every live child
# (backends, checkpointer, WAL writer, ...). Only this cluster: other clusters on the machine are
# not its children.
pg_ticks() {
  local pm files=() pid
  pm=$(head -n 1 "$WORK/pg/data/postmaster.pid")
  for pid in $(pgrep -P "$pm"); do files+=("/proc/$pid/stat"); done
  # cat, not awk's own file list: mawk gives up on a file that vanished (a backend that ended)
  { cat "/proc/$pm/stat"; [[ ${#files[@]} -eq 0 ]] || cat "${files[@]}" 2>/dev/null || true; } |
    awk '{ sub(/.*\) /, ""); t += $12 + $13; if (NR == 1) t += $14 + $15 } END { print t + 0 }'
}

# machine_ticks: "busy total" of the whole machine so far (all CPUs; busy is user, nice, system
# and interrupts; total adds idle, iowait and time stolen by the hypervisor).
machine_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }

# cpu_begin: notes the cluster's, the simulator's and the machine's ticks before a drain.
cpu_begin() {
  CPU0_PG=$(pg_ticks)
  CPU0_SIM=$(proc_ticks "$SIM_PID")
  read -r CPU0_BUSY CPU0_ALL < <(machine_ticks)
}

# cpu_end SYSTEM_TICKS EVENTS [SYSTEM_STARTUP PG_STARTUP]: key=value words for emit: CPU
# milliseconds per event of the system under test (SYSTEM_TICKS: what its process used since it
# started, less SYSTEM_STARTUP), of PostgreSQL (since cpu_begin, less PG_STARTUP) and of the
# simulator (since cpu_begin), their sum, and the share of the machine the rest of it used
# meanwhile: other users of the CPUs, plus this harness's own psql polls.
cpu_end() {
  local pg sim busy all
  pg=$(( $(pg_ticks) - CPU0_PG ))
  sim=$(( $(proc_ticks "$SIM_PID") - CPU0_SIM ))
  read -r busy all < <(machine_ticks)
  awk -v raw="$1" -v n="$2" -v sut0="${3:-0}" -v pg0="${4:-0}" -v pg="$pg" -v sim="$sim" \
    -v busy=$((busy - CPU0_BUSY)) -v all=$((all - CPU0_ALL)) -v hz="$(getconf CLK_TCK)" \
    -v load="$(cut -d ' ' -f 1 /proc/loadavg)" 'BEGIN {
      ms = 1000 / hz / n
      sut = raw - sut0; if (sut < 0) sut = 0
      pgw = pg - pg0; if (pgw < 0) pgw = 0
      others = busy - raw - pg - sim; if (others < 0) others = 0
      printf "cpu_process_ms=%.4f cpu_postgres_ms=%.4f cpu_simulator_ms=%.4f cpu_total_ms=%.4f ",
        sut * ms, pgw * ms, sim * ms, (sut + pgw + sim) * ms
      printf "cpu_others_pct=%.1f machine_busy_pct=%.1f load1_end=%s\n",
        all ? 100 * others / all : 0, all ? 100 * busy / all : 0, load
    }'
}

# --- backlogs and drains (shared by run.sh and profile.sh) ---------------------------------------

# outboxd_sets CONCURRENCY [CONNECTIONS]: sets OUTBOXD_SETS to outboxd's --set options for
# CONCURRENCY calls in flight, and OUTBOXD_POOL / OUTBOXD_CIF to its processors and calls in flight
# per processor: a processor per 16 calls in flight, at most PROCESSORS of them (threads; PROCESSORS
# comes from BENCH_PROCESSORS, default 4), each with outbox.callsInFlight = CONCURRENCY / processors
# (rounded up). Fewer processors with more calls each share their database round trips among more
# runs: at 256 calls in flight, 4 x 64 took half the database CPU per event of 16 x 16, at 4 calls
# in flight (latency 0) 1 x 4 two thirds of the machine CPU per event of 2 x 2, at 16 1 x 16 about
# four fifths of 2 x 8's at the same rate. PROCESSORS=0:
# ceil(CONCURRENCY / CALLS_IN_FLIGHT) processors instead (BENCH_CALLS_IN_FLIGHT, default 16). With
# CONNECTIONS (the slow-partner measure) outboxd opens at most that many database connections in
# all: at most CONNECTIONS processors (beyond, the calls in flight per processor grow instead),
# outbox.connections = CONNECTIONS - 3 (processors, dead-letter processors, janitor),
# database.poolSize = 2 (the API's: only /readyz uses it here) and the listener's one.
# CALLS_IN_FLIGHT=0 (and PROCESSORS=0), for a binary from before outbox.callsInFlight: one
# processor per call in flight.
outboxd_sets() {
  local conc=$1 conns=${2:-} per=${CALLS_IN_FLIGHT:-16} procs=${PROCESSORS:-0}
  if [[ "$procs" -gt 0 ]]; then
    OUTBOXD_POOL=$(( (conc + 15) / 16 < procs ? (conc + 15) / 16 : procs ))
    if [[ -n "$conns" && "$OUTBOXD_POOL" -gt "$conns" ]]; then OUTBOXD_POOL=$conns; fi
    OUTBOXD_CIF=$(( (conc + OUTBOXD_POOL - 1) / OUTBOXD_POOL ))
    OUTBOXD_SETS=(--set outbox.poolSize="$OUTBOXD_POOL" --set outbox.callsInFlight="$OUTBOXD_CIF")
  elif [[ "$per" -gt 0 ]]; then
    OUTBOXD_POOL=$(( (conc + per - 1) / per ))
    if [[ -n "$conns" && "$OUTBOXD_POOL" -gt "$conns" ]]; then OUTBOXD_POOL=$conns; fi
    OUTBOXD_CIF=$(( (conc + OUTBOXD_POOL - 1) / OUTBOXD_POOL ))
    OUTBOXD_SETS=(--set outbox.poolSize="$OUTBOXD_POOL" --set outbox.callsInFlight="$OUTBOXD_CIF")
  else
    OUTBOXD_POOL=$conc OUTBOXD_CIF=1
    OUTBOXD_SETS=(--set outbox.poolSize="$conc")
  fi
  if [[ -n "$conns" ]]; then
    OUTBOXD_SETS+=(--set database.poolSize=2 --set outbox.connections="$((conns - 3))")
  fi
}

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

# remaining_sql SYSTEM: orders (and outbox rows / jobs) not finished yet. Cheap with any history:
# every count uses a partial or leading-column index.
remaining_sql() {
  if [[ "$1" == outboxd ]]; then
    echo "(SELECT count(*) FROM orders WHERE order_status = 'PENDING' AND NOT deleted)
        + (SELECT count(*) FROM outbox_events WHERE status = 'PENDING')
        + (SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING')
        + (SELECT count(*) FROM outbox_events WHERE status = 'DEAD')"
  else
    echo "(SELECT count(*) FROM peer.orders WHERE order_status = 'PENDING' AND NOT deleted)
        + (SELECT count(*) FROM graphile_worker._private_jobs)"
  fi
}
remaining() { q bench "SELECT $(remaining_sql "$1")"; }

# The client connections to database bench by application_name, a worker connection's number
# stripped (outboxd-worker-7 counts as outboxd-worker), the harness's psql left out:
# "graphile-worker=16" or "outboxd=1,outboxd-listener=1,outboxd-worker=16".
CONNECTIONS_SQL="(SELECT coalesce(string_agg(a || '=' || n, ',' ORDER BY a), '') FROM (
    SELECT regexp_replace(application_name, '-[0-9]+$', '') AS a, count(*) AS n FROM pg_stat_activity
     WHERE datname = 'bench' AND backend_type = 'client backend' AND application_name <> 'psql'
     GROUP BY 1) c)"

# poll_open / poll_close: one psql session on database bench for wait_drained's polls while a
# drain's CPU is counted (a new psql per poll would start a backend 4 times a second, tens of
# milliseconds of PostgreSQL's CPU each on a busy machine).
poll_open() {
  coproc POLL { psql -X -q -At -d bench 2>&1; }
}
poll_close() {
  [[ -n "${POLL_PID:-}" ]] || return 0
  local pid=$POLL_PID
  echo '\q' >&"${POLL[1]}"
  wait "$pid" 2>/dev/null || true
  unset POLL_PID
}
# poll SQL: sets ROW to the one row of SQL, through the open session (else a psql of its own).
# Not in a $(...): the session's pipes do not reach subshells.
poll() {
  if [[ -n "${POLL_PID:-}" ]]; then
    echo "$1;" >&"${POLL[1]}"
    IFS= read -r -t 60 ROW <&"${POLL[0]}" || die "no answer from the polling psql session"
  else
    ROW=$(q bench "$1")
  fi
}

# wait_drained SYSTEM [PID SAMPLES]: polls every 0.5 s; fails when nothing moves for 60 s. With
# PID, every poll also appends "threads rss_kb connections" of that process to the file SAMPLES
# (the same query: no extra database session). Through an open poll session the query is prepared
# once: planned at every poll it cost PostgreSQL 4 ms of planning besides 8 ms of running on the
# churned tables of a drain, CPU that the drain's figures count as the system's.
wait_drained() {
  local sql left last=-1 still=0 conns
  sql="SELECT $(remaining_sql "$1")"
  [[ -z "${2:-}" ]] || sql+=", $CONNECTIONS_SQL"
  if [[ -n "${POLL_PID:-}" ]]; then
    echo "DEALLOCATE ALL; PREPARE drain_left AS $sql;" >&"${POLL[1]}"
    sql="EXECUTE drain_left"
  fi
  while :; do
    poll "$sql"
    left=${ROW%%|*}
    if [[ -n "${2:-}" ]]; then
      conns=${ROW#*|}
      awk -v c="${conns:--}" '$1 == "Threads:" { t = $2 } $1 == "VmRSS:" { r = $2 }
        END { if (t) print t, r, c }' "/proc/$2/status" >>"$3" 2>/dev/null || true
    fi
    [[ "$left" =~ ^[0-9]+$ ]] || die "drain poll answered: $left"
    [[ "$left" -eq 0 ]] && return 0
    if [[ "$left" -eq "$last" ]]; then
      still=$((still + 1))
      [[ $still -lt 120 ]] || die "$1 stopped draining with $left left; see $WORK/logs"
    else
      still=0
      last=$left
    fi
    sleep 0.5
  done
}
