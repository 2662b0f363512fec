#!/usr/bin/env bash
# Where a drain spends its time: one drain of outboxd (or of the graphile-worker peer) with the CPU
# each process used per event, the database's transactions per event, its statements, and
# optionally a perf profile of the machine. For outboxd also where an event's time in flight goes
# (from the audit rows): between a call's row and the next call, its calls against its whole time;
# and how full the slots were (from its busy-slot metric). A tool for finding where the time goes;
# bench/run.sh gives the figures.
#
#   bench/profile.sh [--orders N] [--concurrency C] [--latency MS] [--peer] [--perf] [--threads] [--set K=V]...
#
#   --orders N        backlog size (default 3000)
#   --concurrency C   calls in flight: outboxd's outbox.poolSize x outbox.callsInFlight (as in
#                     run.sh: one processor per 16 calls, at most BENCH_PROCESSORS (the CPU count); --set
#                     overrides),
#                     or the peer's concurrency (default 4)
#   --latency MS      simulator latency per call (default 0)
#   --peer            drain graphile-worker instead of outboxd
#   --set KEY=VALUE   passed on to outboxd serve (repeatable), e.g. --set outbox.batchSize=400
#   --perf            record the whole machine with `perf record -a -g -e cpu-clock` (software
#                     clock: no hardware counters in this VM) and print the top of
#                     `perf report` by process and symbol
#   --threads         (outboxd) sample what its processors' threads do during the drain, every
#                     10 ms: running (on a CPU or waiting for one), waiting on PostgreSQL, waiting
#                     for calls, in a futex (its mailbox when idle, or a lock). A processor's
#                     thread runs its calls and statements one after the other: waiting on
#                     PostgreSQL, it serves no answer. The sampler costs under a twentieth of a
#                     core.
#
# Prints its figures on a few lines; the work folder (logs, perf.data) is kept when BENCH_KEEP=1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH="$ROOT/bench"
OUTBOXD=${OUTBOXD:-$ROOT/build/release/outboxd}
PROCESSORS=${BENCH_PROCESSORS:-$(nproc)}
CALLS_IN_FLIGHT=${BENCH_CALLS_IN_FLIGHT:-16}
DRAIN_ORDERS=3000 CONCURRENCY=4 LATENCY=0 SYSTEM=outboxd PERF=0 THREADS=0 INTAKE_CLIENTS=8 EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --orders) DRAIN_ORDERS=${2:?}; shift ;;
    --concurrency) CONCURRENCY=${2:?}; shift ;;
    --latency) LATENCY=${2:?}; shift ;;
    --peer) SYSTEM=peer ;;
    --perf) PERF=1 ;;
    --threads) THREADS=1 ;;
    --set) EXTRA+=(--set "${2:?}"); shift ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "usage: bench/profile.sh [--orders N] [--concurrency C] [--latency MS] [--peer] [--perf] [--threads] [--set K=V]..." >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$OUTBOXD" ]] || { echo "profile: $OUTBOXD is missing (cmake --build --preset release)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/outboxd-profile.XXXXXX)
chmod 755 "$WORK"
mkdir -p "$WORK/logs"
RAW="$WORK/raw.jsonl"
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$BENCH/lib/common.sh"

trap cleanup EXIT
trap 'exit 130' INT TERM

# cpu_ticks PID...: user + system clock ticks the processes used so far (gone ones count 0).
cpu_ticks() { pid_ticks "$@" | awk '{ total += $2 } END { print total + 0 }'; }
# pid_ticks PID...: "pid ticks" per live process.
pid_ticks() {
  local pid
  # one file at a time: mawk gives up on a file that vanished (a backend that ended)
  for pid in "$@"; do
    awk -v p="$pid" '{ sub(/.*\) /, ""); print p, $12 + $13 }' "/proc/$pid/stat" 2>/dev/null || true
  done
}
commits() { q postgres "SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database WHERE datname = 'bench'"; }
# switches PID: context switches (voluntary and not) of PID's live threads: each one a wake-up
# or a preemption, which on this kind of VM costs more than most of the work between them.
switches() {
  cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { n += $2 } END { print n + 0 }'
}
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }

# pg_stat_statements: which statements the drain's database time goes to
PG_EXTRA_OPTS="${PG_EXTRA_OPTS:-} -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c pg_stat_statements.track_planning=on"
export PG_EXTRA_OPTS
start_postgres
q postgres "CREATE EXTENSION pg_stat_statements"
start_simulator
if [[ "$SYSTEM" == outboxd ]]; then
  q postgres "CREATE DATABASE t_empty" >/dev/null
  DATABASE_URL=$(conninfo t_empty) "$OUTBOXD" migrate >>"$WORK/logs/outboxd.log" 2>&1
  load_backlog t_backlog t_empty
  fresh_db bench t_backlog
else
  [[ -d "$BENCH/peer/node_modules" ]] || npm ci --prefix "$BENCH/peer" --no-audit --no-fund >&2
  q postgres "CREATE DATABASE bench" >/dev/null
  psql -X -q -v ON_ERROR_STOP=1 -d bench -f "$BENCH/peer/schema.sql" >/dev/null
  PGDATABASE=bench node "$BENCH/peer/worker.js" --migrate >>"$WORK/logs/peer.log" 2>&1
  PGDATABASE=bench node "$BENCH/peer/intake.js" backlog "$DRAIN_ORDERS" "$INTAKE_CLIENTS" >/dev/null
  q bench "VACUUM (ANALYZE)"
fi
sim_reset "$LATENCY"

log "$SYSTEM: draining $DRAIN_ORDERS orders at concurrency $CONCURRENCY, latency $LATENCY ms"
# The system's CPU counts from its start (start-up included); the others' from here.
q postgres "SELECT pg_stat_statements_reset()" >/dev/null
poll_open # one session for the drain's polls, opened before the counting starts
pg_before=$(pg_ticks) # this cluster only (lib/common.sh), ended backends included
sim0=$(cpu_ticks "$SIM_PID") busy0=$(busy_ticks) tx0=$(commits) simsw0=$(switches "$SIM_PID")
if [[ "$SYSTEM" == outboxd ]]; then
  outboxd_sets "$CONCURRENCY"
  start_outboxd bench "${OUTBOXD_SETS[@]}" "${EXTRA[@]}"
  pid=$OUTBOXD_PID
else
  start_peer bench "$CONCURRENCY"
  pid=$PEER_PID
fi
if [[ "$PERF" == 1 ]]; then
  perf record -a -g -e cpu-clock -F 499 -o "$WORK/perf.data" >"$WORK/logs/perf.log" 2>&1 &
  perf_pid=$!
fi
if [[ "$THREADS" == 1 && "$SYSTEM" == outboxd ]]; then
  "$PYTHON" "$BENCH/lib/bench.py" thread-states "$pid" >"$WORK/threads.txt" &
  threads_pid=$! # python itself, not a subshell: the TERM below must reach it
fi
wait_drained "$SYSTEM"
if [[ "$PERF" == 1 ]]; then kill -INT "$perf_pid"; wait "$perf_pid" || true; fi
stop_pid "${threads_pid:-}" # it prints its summary on the way out
poll_close
sut=$(cpu_ticks "$pid") sim1=$(cpu_ticks "$SIM_PID") busy1=$(busy_ticks)
sutsw=$(switches "$pid") simsw1=$(switches "$SIM_PID")
pg_after=$(pg_ticks)
if [[ "$SYSTEM" == outboxd ]]; then
  busy_slots=$(curl -fsS "$OUTBOXD_URL/metrics" |
    awk '/^outboxd_processor_busy_slot_seconds_total\{queue="outbox"\}/ { print $2 }')
fi
stop_outboxd
stop_peer
tx1=$(commits) # backends report their statistics when they exit
statements=$(q postgres "SELECT format('%8s ms %6s ms plan %7s calls %7s rows %6s ms max  %s', round(total_exec_time), round(total_plan_time), calls, rows, round(max_exec_time),
    left(regexp_replace(query, '\s+', ' ', 'g'), 110))
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'bench')
  ORDER BY total_exec_time + total_plan_time DESC LIMIT 12")
if [[ "$SYSTEM" == outboxd ]]; then s=""; else s="peer."; fi
# the drain's span as bench/run.sh takes it: first call started → last order CONFIRMED
span=$(q bench "SELECT extract(epoch FROM (SELECT max(updated_at) FROM ${s}orders)
  - (SELECT min(published_at - duration_ms * interval '1 ms') FROM ${s}aggregate_results))")

# between one call's attempt row and the event's next call: the row's commit, the run's resumption
# and the call's sending, plus the wait for the worker's thread (outboxd only; ms)
breakdown=""
if [[ "$SYSTEM" == outboxd ]]; then
  breakdown=$(q bench "WITH s AS (SELECT extract(epoch FROM published_at - duration_ms * interval '1 ms'
      - lag(published_at) OVER (PARTITION BY event_id ORDER BY id)) * 1000 AS gap FROM aggregate_results)
    SELECT format('%s / %s / %s', round(percentile_cont(0.5) WITHIN GROUP (ORDER BY gap)::numeric, 1),
      round(avg(gap)::numeric, 1), round(percentile_cont(0.99) WITHIN GROUP (ORDER BY gap)::numeric, 1))
    FROM s WHERE gap IS NOT NULL")
  breakdown+=" | per event, mean ms: calls $(q bench "SELECT round(avg(d)::numeric, 1) || ', first call -> done ' || round(avg(span)::numeric, 1)
    FROM (SELECT sum(r.duration_ms) AS d, extract(epoch FROM e.processed_at - min(r.published_at - r.duration_ms * interval '1 ms')) * 1000 AS span
      FROM aggregate_results r JOIN outbox_events e ON e.id = r.event_id GROUP BY e.id, e.processed_at) x")"
  # how full the slots were: the slot-seconds the processors' runs held (their metric) over the
  # drain's span and the concurrency
  breakdown+=" | slots in use: $(awk -v b="${busy_slots:-0}" -v t="$span" -v c="$CONCURRENCY" 'BEGIN { printf "%.3f", b / t / c }')"
fi
pg_used=$((pg_after - pg_before))
hz=$(getconf CLK_TCK)
awk -v n="$DRAIN_ORDERS" -v t="$span" -v hz="$hz" -v sut="$sut" \
  -v sim=$((sim1 - sim0)) -v pg="$pg_used" -v busy=$((busy1 - busy0)) -v tx=$((tx1 - tx0)) \
  -v sys="$SYSTEM" -v c="$CONCURRENCY" -v l="$LATENCY" -v sutsw="$sutsw" -v simsw=$((simsw1 - simsw0)) 'BEGIN {
    ms = 1000 / hz / n
    printf "%s c=%d latency=%dms: %.0f events/s in %.1fs | CPU ms/event: %s %.2f, simulator %.2f, postgres %.2f, machine %.2f | transactions/event %.1f | context switches/event: %s %.1f, simulator %.1f\n",
      sys, c, l, n / t, t, sys, sut * ms, sim * ms, pg * ms, busy * ms, tx / n, sys, sutsw / n, simsw / n }'
[[ -z "$breakdown" ]] || echo "between a call's attempt row and the event's next call, ms p50 / mean / p99: $breakdown"
if [[ -n "${threads_pid:-}" ]]; then
  echo "the threads of outboxd's detached actors that worked, share of the drain's samples:"
  cat "$WORK/threads.txt"
fi
echo "statements by database time (running, planning, the longest run):"
echo "$statements"
if [[ "$PERF" == 1 ]]; then
  perf report -i "$WORK/perf.data" --no-children --sort comm,dso,symbol --stdio 2>/dev/null |
    grep -E '^ +[0-9]' | head -40
fi
