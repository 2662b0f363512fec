#!/usr/bin/env bash
# Billing goes down for two minutes while orders keep coming: what does it cost, with and without
# circuit breakers? See bench/README.md ("Hostile destinations").
#
#   bench/outage.sh            full: 30 s normal, 60 s refused, 60 s hanging, recovered until the
#                              backlog is drained; each variant about 5 minutes
#   bench/outage.sh --quick    10 / 20 / 20 s (about 2 minutes a variant)
#   bench/outage.sh --smoke    2 / 2 / 2 s, the first variant that can run: does the harness work
#                              (under a minute)
#   --rate N                   orders per second (default 20; 10 with --smoke)
#   --out FILE                 JSON to FILE and the Markdown next to it (default: full and quick
#                              runs write bench/results/<date>-outage.json and .md; smoke a
#                              temporary file)
#
# Variants (BENCH_OUTAGE_VARIANTS, default "with without"): "with" runs the shipped defaults,
# "without" adds --set http.routes.billing.circuitBreaker.enabled=false. BENCH_OUTAGE_SETS_<NAME>
# replaces a variant's own --set options (key=value, space separated; any other name is a variant
# of its own), BENCH_OUTAGE_SETS adds options to every variant. On a binary that has no circuit
# breaker keys, "with" is reported as skipped and "without" runs with no breaker option.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH="$ROOT/bench"
OUTBOXD=${OUTBOXD:-$ROOT/build/release/outboxd}

mode=full
out=""
rate=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) mode=quick ;;
    --smoke) mode=smoke ;;
    --rate) rate=${2:?--rate needs a number}; shift ;;
    --out) out=${2:?--out needs a file}; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "usage: bench/outage.sh [--quick|--smoke] [--rate N] [--out FILE]" >&2; exit 2 ;;
  esac
  shift
done

# --- timeline per mode (each can be overridden through the environment) -------------------------
case "$mode" in
  full)  d_normal=30 d_refuse=60 d_hang=60 d_after=30 d_cap=300 d_settle=60 d_rate=20 d_variants="with without" ;;
  quick) d_normal=10 d_refuse=20 d_hang=20 d_after=10 d_cap=120 d_settle=60 d_rate=20 d_variants="with without" ;;
  smoke) d_normal=2  d_refuse=2  d_hang=2  d_after=2  d_cap=30  d_settle=20 d_rate=10 d_variants="with without" ;;
esac
NORMAL=${BENCH_OUTAGE_NORMAL:-$d_normal}    # seconds of normal traffic before billing goes down
REFUSE=${BENCH_OUTAGE_REFUSE:-$d_refuse}    # seconds billing refuses connections
HANG=${BENCH_OUTAGE_HANG:-$d_hang}          # seconds billing accepts and never answers
AFTER=${BENCH_OUTAGE_AFTER:-$d_after}       # orders keep coming at least this long after recovery,
CAP=${BENCH_OUTAGE_CAP:-$d_cap}             # ... and until the backlog is drained, at most CAP s
SETTLE=${BENCH_OUTAGE_SETTLE:-$d_settle}    # then at most this long for the last orders to finish
RATE=${rate:-${BENCH_OUTAGE_RATE:-$d_rate}} # orders per second, for the whole run
CLIENTS=${BENCH_OUTAGE_CLIENTS:-4}          # keep-alive connections sharing the order schedule
POOL=${BENCH_OUTAGE_POOL:-}                 # outbox.poolSize (empty: the shipped default)
VARIANTS=${BENCH_OUTAGE_VARIANTS:-$d_variants}
COMMON_SETS=${BENCH_OUTAGE_SETS:-}
BREAKER_OFF="http.routes.billing.circuitBreaker.enabled=false"

for t in psql curl python3; do
  command -v "$t" >/dev/null || { echo "outage: $t is missing (see bench/README.md)" >&2; exit 1; }
done
if [[ ! -x "$OUTBOXD" ]]; then
  echo "outage: $OUTBOXD is missing; building Release" >&2
  (cd "$ROOT" && cmake --preset release && cmake --build --preset release -j 2)
fi

WORK=$(mktemp -d /tmp/outboxd-outage.XXXXXX)
chmod 755 "$WORK" # the cluster runs as the postgres user when we are root
mkdir -p "$WORK/logs"
RAW="$WORK/raw.jsonl"
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$BENCH/lib/common.sh"
scen() { "$PYTHON" "$BENCH/lib/scenarios.py" "$@"; }
now() { date +%s.%N; }

stop_variant_helpers() {
  stop_pid "${POSTER_PID:-}"; POSTER_PID=
  stop_pid "${PROXY_PID:-}"; PROXY_PID=
}
on_exit() {
  local status=$?
  set +e # (exit "$status") below hands the status to cleanup; with errexit it would end the trap
  stop_variant_helpers
  (exit "$status")
  cleanup
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# --- helpers -------------------------------------------------------------------------------------

# The variant's own --set options: BENCH_OUTAGE_SETS_<NAME> when given, else its default.
own_sets() {
  local var="BENCH_OUTAGE_SETS_${1^^}"
  if [[ -n "${!var+x}" ]]; then echo "${!var}"; return; fi
  case "$1" in
    without) [[ "$BREAKERS" == 1 ]] && echo "$BREAKER_OFF" || echo "" ;;
    *) echo "" ;;
  esac
}

# set_args KEY=VALUE...: the --set arguments, one per line, for mapfile.
set_args() { for s in "$@"; do printf -- '--set\n%s\n' "$s"; done; }

proxy() { curl -fsS -X "$1" "$PROXY_CTL$2"; }
# switch MODE: the proxy's new mode; prints the moment it took effect (epoch seconds, the proxy's
# own clock reading, so the time curl and the shell take is not part of any window).
switch() {
  proxy PUT "/mode/$1" | "$PYTHON" -c 'import json, sys; print(repr(json.load(sys.stdin)["at"]))'
}

# unfinished_before EPOCH: events (and their dead letters) of orders that arrived before EPOCH and
# are still PENDING or PROCESSING.
unfinished_before() {
  q bench "SELECT (SELECT count(*) FROM outbox_events
                    WHERE status IN ('PENDING', 'PROCESSING') AND created_at < to_timestamp($1))
                + (SELECT count(*) FROM dead_letter_events d JOIN outbox_events e ON e.id = d.original_event_id
                    WHERE d.status IN ('PENDING', 'PROCESSING') AND e.created_at < to_timestamp($1))"
}

# measure T_DOWN T_HANG T_RECOVER: every figure of one variant from the database, as one JSON object.
measure() {
  local t0="to_timestamp($1)" t1="to_timestamp($2)" t2="to_timestamp($3)"
  q bench "
WITH b AS (
  SELECT outcome, coalesce(error_message, '') AS err, coalesce(duration_ms, 0) AS d,
         published_at - coalesce(duration_ms, 0) * interval '1 ms' AS started
  FROM aggregate_results WHERE destination = 'billing'),
w AS (SELECT * FROM b WHERE started >= $t0 AND started < $t2),
lat AS (
  SELECT o.created_at, e.status, extract(epoch FROM e.processed_at - o.created_at) * 1000 AS ms
  FROM orders o JOIN outbox_events e ON e.aggregate_id = o.id::text AND e.event_type = 'OrderCreated'),
pre AS (SELECT e.id, e.status, e.status_changed_at FROM outbox_events e WHERE e.created_at < $t2)
SELECT json_build_object(
  'orders', (SELECT json_build_object(
      'total', count(*),
      'failed_or_attention', count(*) FILTER (WHERE order_status IN ('FAILED', 'ATTENTION')),
      'unfinished', count(*) FILTER (WHERE order_status IN ('PENDING', 'CANCELLING')),
      'by_status', (SELECT json_object_agg(order_status, n) FROM
                     (SELECT order_status, count(*) AS n FROM orders GROUP BY 1) x))
    FROM orders),
  'events', (SELECT json_build_object(
      'total', count(*), 'processed', count(*) FILTER (WHERE status = 'PROCESSED'),
      'dead', count(*) FILTER (WHERE status = 'DEAD'),
      'unfinished', count(*) FILTER (WHERE status IN ('PENDING', 'PROCESSING')),
      'max_attempts', max(attempts))
    FROM outbox_events),
  'billing_outage', (SELECT json_build_object(
      'rows', count(*),
      'rows_refused', count(*) FILTER (WHERE started < $t1),
      'rows_hanging', count(*) FILTER (WHERE started >= $t1),
      'wait_s', round(coalesce(sum(d), 0) / 1000.0, 1),
      'wait_s_refused', round(coalesce(sum(d) FILTER (WHERE started < $t1), 0) / 1000.0, 1),
      'wait_s_hanging', round(coalesce(sum(d) FILTER (WHERE started >= $t1), 0) / 1000.0, 1),
      'by_error', (SELECT json_agg(json_build_object('outcome', outcome, 'error', err, 'n', n) ORDER BY n DESC)
                   FROM (SELECT outcome, left(err, 90) AS err, count(*) AS n FROM w GROUP BY 1, 2) x))
    FROM w),
  'billing_rows_total', (SELECT count(*) FROM b),
  'billing_revert_rows_total', (SELECT count(*) FROM aggregate_results WHERE destination = 'billing.revert'),
  'drain_after_recovery_s', (SELECT CASE
      WHEN (SELECT count(*) FROM pre WHERE status IN ('PENDING', 'PROCESSING')) > 0
        OR (SELECT count(*) FROM dead_letter_events d JOIN pre ON pre.id = d.original_event_id
             WHERE d.status IN ('PENDING', 'PROCESSING')) > 0 THEN NULL
      ELSE round(greatest(0, extract(epoch FROM greatest(
             (SELECT max(status_changed_at) FROM pre),
             (SELECT max(d.status_changed_at) FROM dead_letter_events d JOIN pre ON pre.id = d.original_event_id))
           - $t2))::numeric, 1) END),
  'after_recovery', (SELECT json_build_object(
      'orders', count(*), 'not_processed', count(*) FILTER (WHERE status <> 'PROCESSED'),
      'p50_ms', round((percentile_disc(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE status = 'PROCESSED'))::numeric, 1),
      'p99_ms', round((percentile_disc(0.99) WITHIN GROUP (ORDER BY ms) FILTER (WHERE status = 'PROCESSED'))::numeric, 1),
      'max_ms', round((max(ms) FILTER (WHERE status = 'PROCESSED'))::numeric, 1))
    FROM lat WHERE created_at >= $t2),
  'after_recovery_by_5s', (SELECT json_agg(json_build_object('from_s', k * 5, 'orders', n, 'p99_ms', p99, 'max_ms', mx) ORDER BY k)
    FROM (SELECT floor(extract(epoch FROM created_at - $t2) / 5)::int AS k, count(*) AS n,
                 round((percentile_disc(0.99) WITHIN GROUP (ORDER BY ms))::numeric, 1) AS p99,
                 round(max(ms)::numeric, 1) AS mx
          FROM lat WHERE created_at >= $t2 AND status = 'PROCESSED' GROUP BY 1) x),
  'outage_orders', (SELECT json_build_object(
      'orders', count(*), 'not_processed', count(*) FILTER (WHERE status <> 'PROCESSED'),
      'p50_ms', round((percentile_disc(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE status = 'PROCESSED'))::numeric, 1),
      'p99_ms', round((percentile_disc(0.99) WITHIN GROUP (ORDER BY ms) FILTER (WHERE status = 'PROCESSED'))::numeric, 1))
    FROM lat WHERE created_at >= $t0 AND created_at < $t2),
  'before_outage', (SELECT json_build_object(
      'orders', count(*),
      'p99_ms', round((percentile_disc(0.99) WITHIN GROUP (ORDER BY ms) FILTER (WHERE status = 'PROCESSED'))::numeric, 1))
    FROM lat WHERE created_at < $t0))"
}

# --- one variant ---------------------------------------------------------------------------------

run_variant() {
  local name=$1 sets t_start t_down t_hang t_recover t_stop left waited proxy_port ctl_port
  local -a own all args route
  read -r -a own <<<"$(own_sets "$name")"
  read -r -a all <<<"$COMMON_SETS"
  all=("${own[@]}" "${all[@]}")
  [[ -n "$POOL" ]] && all+=("outbox.poolSize=$POOL")
  if [[ "$name" == with && "$BREAKERS" == 0 && -z "${BENCH_OUTAGE_SETS_WITH+x}" ]]; then
    log "variant $name: skipped (this outboxd has no circuitBreaker keys)"
    emit kind=outage variant="$name" skipped='"this outboxd has no http.routes.*.circuitBreaker keys"'
    return
  fi
  sets="${all[*]}"
  log "variant $name: ${sets:-(no extra --set)}"

  # the proxy in front of the simulator, and billing's URLs pointed at it
  proxy_port=$(free_port)
  ctl_port=$(free_port)
  "$PYTHON" "$BENCH/lib/outage_proxy.py" --listen "$proxy_port" --upstream "${SIM_URL#http://}" \
    --control "$ctl_port" >>"$WORK/logs/proxy-$name.log" 2>&1 &
  PROXY_PID=$!
  PROXY_CTL="http://127.0.0.1:$ctl_port"
  wait_http "$PROXY_CTL/healthz" "$PROXY_PID" "proxy-$name"
  mapfile -t args < <(set_args "${all[@]}")
  "$OUTBOXD" check-config --set simulator.enabled=false --set simulator.baseUrl="$SIM_URL" "${args[@]}" \
    >"$WORK/config-$name.json" 2>"$WORK/logs/check-config-$name.log" ||
    die "variant $name: outboxd refuses its configuration: $(tail -n 3 "$WORK/logs/check-config-$name.log")"
  mapfile -t route < <(scen route-sets "$WORK/config-$name.json" billing "$SIM_URL" "http://127.0.0.1:$proxy_port")
  mapfile -t route < <(set_args "${route[@]}")

  fresh_db bench t_empty
  sim_reset 0
  start_outboxd bench "${route[@]}" "${args[@]}"
  t_start=$(now)
  "$PYTHON" "$BENCH/lib/scenarios.py" post "$OUTBOXD_URL" "$RATE" "$CLIENTS" "$WORK/poster-$name.json" \
    2>>"$WORK/logs/poster.log" &
  POSTER_PID=$!
  wait_file "$WORK/poster-$name.json" "$POSTER_PID" "order poster"

  log "variant $name: ${NORMAL}s normal at $RATE orders/s"
  sleep "$NORMAL"
  t_down=$(switch refuse)
  log "variant $name: billing refuses connections for ${REFUSE}s"
  sleep "$REFUSE"
  t_hang=$(switch hang)
  log "variant $name: billing accepts and never answers for ${HANG}s"
  sleep "$HANG"
  t_recover=$(switch pass)
  log "variant $name: billing answers again; orders go on for at least ${AFTER}s and until the backlog is drained (at most ${CAP}s)"

  waited=0
  while :; do
    sleep 0.5
    waited=$(awk -v a="$t_recover" -v b="$(now)" 'BEGIN { print b - a }')
    awk -v w="$waited" -v m="$AFTER" 'BEGIN { exit !(w >= m) }' || continue
    left=$(unfinished_before "$t_recover")
    [[ "$left" -eq 0 ]] && break
    if awk -v w="$waited" -v c="$CAP" 'BEGIN { exit !(w >= c) }'; then
      log "variant $name: $left events of orders from before the recovery still unfinished after ${CAP}s"
      break
    fi
  done
  t_stop=$(now)
  stop_pid "$POSTER_PID"; POSTER_PID=
  log "variant $name: orders stopped $(printf '%.1f' "$waited")s after recovery; waiting for the last ones (at most ${SETTLE}s)"
  for _ in $(seq $((SETTLE * 2))); do
    [[ $(unfinished_before "$(now)") -eq 0 ]] && break
    sleep 0.5
  done
  stop_outboxd
  proxy GET /stats >"$WORK/proxy-$name.json"
  stop_pid "$PROXY_PID"; PROXY_PID=

  measure "$t_down" "$t_hang" "$t_recover" >"$WORK/measure-$name.json"
  # every billing attempt, for a look afterwards (BENCH_KEEP=1 keeps the folder)
  q bench "COPY (SELECT id, event_id, attempt, outcome, published_at - coalesce(duration_ms, 0) * interval '1 ms' AS started,
                        published_at, duration_ms, endpoint_url, error_message
                 FROM aggregate_results WHERE destination LIKE 'billing%' ORDER BY id) TO STDOUT WITH CSV HEADER" \
    >"$WORK/billing-$name.csv"
  "$PYTHON" - "$WORK" "$name" "$t_start" "$t_down" "$t_hang" "$t_recover" "$t_stop" "$sets" <<'EOF'
import json, sys
work, name, t_start, t_down, t_hang, t_recover, t_stop, sets = sys.argv[1:]
m = json.load(open(f"{work}/measure-{name}.json"))
stats = json.load(open(f"{work}/proxy-{name}.json"))
m["proxy"] = stats["by_mode"]
m["poster"] = json.load(open(f"{work}/poster-{name}.json"))
m["sets"] = sets.split()
m["timeline_epoch"] = {"start": float(t_start), "down": float(t_down), "hang": float(t_hang),
                       "recover": float(t_recover), "stop": float(t_stop)}
m["timeline_s"] = {"normal": round(float(t_down) - float(t_start), 1),
                   "refused": round(float(t_hang) - float(t_down), 1),
                   "hanging": round(float(t_recover) - float(t_hang), 1),
                   "recovered_with_orders": round(float(t_stop) - float(t_recover), 1)}
json.dump(m, open(f"{work}/variant-{name}.json", "w"))
EOF
  emit kind=outage variant="$name" "x=@$WORK/variant-$name.json"
  log "variant $name: $(scen outage-line "$WORK/variant-$name.json")"
  RAN=$((RAN + 1))
}

# --- main ----------------------------------------------------------------------------------------
log "mode $mode: variants '$VARIANTS', $RATE orders/s, ${NORMAL}/${REFUSE}/${HANG}s, work folder $WORK"
if "$OUTBOXD" check-config --set "$BREAKER_OFF" >/dev/null 2>&1; then BREAKERS=1; else
  BREAKERS=0
  log "this outboxd has no circuitBreaker keys: 'with' is skipped, 'without' runs without a breaker option"
fi
start_postgres
start_simulator
q postgres "CREATE DATABASE t_empty" >/dev/null
DATABASE_URL=$(conninfo t_empty) "$OUTBOXD" migrate >>"$WORK/logs/outboxd.log" 2>&1 ||
  die "outboxd migrate failed; see $WORK/logs/outboxd.log"
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD 2>/dev/null || commit="$commit+uncommitted changes"
tool meta "$RAW" mode="$mode" date="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  versions.commit="$commit" versions.outboxd="binary sha256 $(sha256sum "$OUTBOXD" | cut -c1-12)" \
  versions.postgresql="$(q postgres 'SHOW server_version')" versions.cpus="$(nproc)" \
  versions.cpu_model="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)" \
  versions.kernel="$(uname -r)" versions.load_average="$(cut -d' ' -f1-3 /proc/loadavg)" settings.breaker_keys="$BREAKERS" \
  settings.rate="$RATE" settings.clients="$CLIENTS" settings.normal_s="$NORMAL" settings.refuse_s="$REFUSE" \
  settings.hang_s="$HANG" settings.after_s="$AFTER" settings.cap_s="$CAP" settings.settle_s="$SETTLE" \
  settings.pool_size="\"${POOL:-shipped default}\"" settings.common_sets="\"$COMMON_SETS\"" \
  settings.variants="\"$VARIANTS\""

RAN=0
FIRST_RAN=""
for v in $VARIANTS; do
  [[ "$v" =~ ^[A-Za-z0-9_]+$ ]] || die "variant names are letters, digits and _: '$v'"
  if [[ "$mode" == smoke && "$RAN" -gt 0 ]]; then break; fi # smoke: the first variant that runs
  run_variant "$v"
  [[ -n "$FIRST_RAN" || "$RAN" -eq 0 ]] || FIRST_RAN=$v
done

if [[ "$mode" == smoke ]]; then
  json=${out:-$(mktemp "${TMPDIR:-/tmp}/outboxd-outage-smoke.XXXXXX.json")}
else
  mkdir -p "$BENCH/results"
  json=${out:-$BENCH/results/$(date -u +%Y-%m-%d)-outage.json}
fi
md="${json%.json}.md"
scen outage-report "$RAW" "$json" "$md"
log "results: $json and $md"
cat "$md"
if [[ "$mode" == smoke ]]; then
  [[ -n "$FIRST_RAN" ]] || die "smoke: no variant ran"
  v="variants.$FIRST_RAN"
  scen check "$json" "$v.orders.total" "$v.billing_outage.rows" "$v.billing_outage.wait_s" \
    "$v.after_recovery.orders" "$v.proxy.hang.connections" "$v.poster.orders_created"
fi
