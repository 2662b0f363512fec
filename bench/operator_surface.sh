#!/usr/bin/env bash
# What the operator surface costs after months: every gauge, statistic, listing and the
# consistency check timed through the API on an empty database, then again with a history of N
# processed orders (each an order, a PROCESSED event and four audit rows: 5 N rows; every other
# event also dead-lettered and resolved), VACUUM ANALYZEd as autovacuum would leave them, and
# with a small history of 5 000 orders that fills every page. Each request is made 20 times after
# 3 warm-ups; the report gives the medians and the ratio of the large history to the small.
#
#   bench/operator_surface.sh [--orders N] [--out STEM]    N = 2 000 000 (10 M history rows);
#                                                          --smoke: 5 000, a temporary STEM
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH="$ROOT/bench"
OUTBOXD=${OUTBOXD:-$ROOT/build/release/outboxd}
orders=2000000 stem="" smoke=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --orders) orders=${2:?}; shift ;;
    --out) stem=${2:?}; shift ;;
    --smoke) smoke=1 orders=5000 ;;
    *) echo "usage: bench/operator_surface.sh [--orders N] [--out STEM] [--smoke]" >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$OUTBOXD" ]] || { echo "bench/operator_surface.sh: build $OUTBOXD first" >&2; exit 1; }

WORK=$(mktemp -d /tmp/outboxd-operator.XXXXXX)
chmod 755 "$WORK"
mkdir -p "$WORK/logs"
RAW=/dev/null
source "$BENCH/lib/common.sh"
trap cleanup EXIT INT TERM
[[ -n "$stem" ]] || stem=$(results_stem operator-surface)

# time_surface LABEL: the API's operator requests against the running outboxd, into LABEL.json.
time_surface() {
  "$PYTHON" - "$OUTBOXD_URL" "$WORK/$1.json" <<'PY'
import json, statistics, sys, time, urllib.error, urllib.request
base, out = sys.argv[1:]
paths = {
    "metrics (gauges)": "/metrics",
    "statistics": "/api/outbox/stats",
    "events, first page": "/api/outbox/events?limit=50",
    "events DEAD": "/api/outbox/events?status=DEAD&limit=50",
    "events of one order": "/api/outbox/events?aggregateId=1",
    "events of a rare type": "/api/outbox/events?eventType=OrderCancelled",
    "dead letters FAILED": "/api/dlq?status=FAILED",
    "dead letters, first page": "/api/dlq?limit=50",
    "orders, first page": "/api/orders?limit=50",
    "orders ATTENTION": "/api/orders?status=ATTENTION",
    "one order's timeline": "/api/orders/1",
    "consistency, newest 1 000": "/api/admin/consistency?limit=1000",
}
result = {}
for name, path in paths.items():
    times = []
    for i in range(23):
        t = time.monotonic()
        try:
            with urllib.request.urlopen(base + path, timeout=120) as r:
                r.read()
        except urllib.error.HTTPError as e:  # 404: no order 1 in the empty database
            e.read()
        if i >= 3:
            times.append((time.monotonic() - t) * 1000)
    result[name] = {"median_ms": round(statistics.median(times), 2),
                    "max_ms": round(max(times), 2)}
json.dump(result, open(out, "w"))
PY
}

# history_db NAME ORDERS: a migrated database NAME holding ORDERS processed orders.
history_db() {
  q postgres "CREATE DATABASE $1" >/dev/null
  DATABASE_URL=$(conninfo "$1") "$OUTBOXD" migrate >"$WORK/logs/migrate.log" 2>&1 ||
    die "outboxd migrate failed: $(cat "$WORK/logs/migrate.log")"
  [[ $2 -gt 0 ]] || return 0
  local start
  start=$(date +%s)
  psql -X -q -v ON_ERROR_STOP=1 -v history="$2" -d "$1" -f "$BENCH/lib/history.sql" >/dev/null
  q "$1" "UPDATE orders SET order_status = 'DELIVERED'" >/dev/null
  q "$1" "UPDATE outbox_events SET status = 'DEAD', processed_at = NULL WHERE id % 2 = 0" >/dev/null
  q "$1" "INSERT INTO dead_letter_events (original_event_id, aggregate_type, aggregate_id,
            event_type, payloads, reason, status, resolved_at)
          SELECT id, aggregate_type, aggregate_id, event_type, payloads, 'MAX_RETRIES_EXCEEDED',
                 'PROCESSED', now() FROM outbox_events WHERE status = 'DEAD'" >/dev/null
  q "$1" "VACUUM ANALYZE" >/dev/null
  log "$1: $2 orders ($(($2 * 5)) history rows) loaded in $(( $(date +%s) - start )) s, $(q "$1" "SELECT pg_size_pretty(pg_database_size('$1'))")"
}

# measure NAME: outboxd on database NAME, its operator surface timed into NAME.json.
measure() {
  start_outboxd "$1" --set outbox.enabled=false
  log "timing the operator surface on $1"
  time_surface "$1"
  stop_outboxd
}

start_postgres
start_simulator
small=$((orders < 5000 ? orders : 5000))
history_db empty 0
history_db small "$small"
history_db large "$orders"
measure empty
measure small
measure large

"$PYTHON" - "$WORK" "$small" "$orders" "$stem" <<'PY'
import json, sys
work, small, orders, stem = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
t = {name: json.load(open(f"{work}/{name}.json")) for name in ("empty", "small", "large")}
rows = {k: {"empty_ms": t["empty"][k]["median_ms"], "small_ms": t["small"][k]["median_ms"],
            "large_ms": t["large"][k]["median_ms"],
            "ratio_large_small": round(t["large"][k]["median_ms"] / t["small"][k]["median_ms"], 2)}
        for k in t["empty"]}
json.dump({"small_orders": small, "large_orders": orders, "large_history_rows": orders * 5,
           "requests": rows}, open(stem + ".json", "w"), indent=1)
n = lambda x: f"{x:,}".replace(",", " ")
lines = [f"# Operator surface: {n(small * 5)} against {n(orders * 5)} history rows", "",
         "Median of 20 requests through the API (after 3 warm-ups). The small history fills every "
         "page, so that the two differ in history only; the empty database answers empty pages.",
         "", f"| request | empty, ms | {n(small * 5)} rows, ms | {n(orders * 5)} rows, ms | large / small |",
         "|---|---|---|---|---|"]
lines += [f"| {k} | {v['empty_ms']} | {v['small_ms']} | {v['large_ms']} | {v['ratio_large_small']} |"
          for k, v in rows.items()]
open(stem + ".md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
log "written: $stem.json, $stem.md"
