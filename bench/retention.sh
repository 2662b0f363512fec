#!/usr/bin/env bash
# How fast can retention delete, and what would partitions buy? On a private PostgreSQL cluster
# with durability on (fsync, synchronous commit), a history of N processed orders as outboxd
# leaves them (bench/lib/history.sql: order, PROCESSED event, four audit rows) is
#   1. copied into a table of its own with the same indexes, which is then dropped whole: what
#      dropping one time partition of that size costs;
#   2. deleted the way the janitor does it: 1 000 PROCESSED events per transaction, oldest first,
#      by pgbench on one connection, while a second connection inserts events (a live table);
#   3. then their audit rows (four per order), once the orders are delivered, by outboxd's own
#      janitor (audit retention, with its per-aggregate checks), timed from its log line.
# Prints one JSON object; bench/README.md ("Retention") has the figures and the decision.
#
#   bench/retention.sh [--rows N]      N = 200000 by default (--smoke: 5000)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH="$ROOT/bench"
OUTBOXD=${OUTBOXD:-$ROOT/build/release/outboxd}
rows=200000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rows) rows=${2:?--rows needs a number}; shift ;;
    --smoke) rows=5000 ;;
    *) echo "usage: bench/retention.sh [--rows N|--smoke]" >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$OUTBOXD" ]] || { echo "bench/retention.sh: build $OUTBOXD first" >&2; exit 1; }

WORK=$(mktemp -d /tmp/outboxd-retention.XXXXXX)
chmod 755 "$WORK" # the cluster runs as the postgres user when we are root
RAW=/dev/null
source "$BENCH/lib/common.sh"
trap 'stop_postgres; rm -rf "$WORK"' EXIT
start_postgres

q postgres "CREATE DATABASE retention" >/dev/null
DATABASE_URL=$(conninfo retention) "$OUTBOXD" migrate >"$WORK/migrate.log" 2>&1 ||
  die "outboxd migrate failed: $(cat "$WORK/migrate.log")"
log "loading $rows processed orders"
psql -X -q -v ON_ERROR_STOP=1 -v history="$rows" -d retention -f "$BENCH/lib/history.sql" >/dev/null
q retention "UPDATE outbox_events SET processed_at = processed_at - interval '30 days'" >/dev/null
q retention "VACUUM (ANALYZE) outbox_events" >/dev/null

# 1. A partition of the same size, dropped whole.
q retention "CREATE TABLE partition_like (LIKE outbox_events INCLUDING ALL)" >/dev/null
q retention "INSERT INTO partition_like SELECT * FROM outbox_events" >/dev/null
drop_ms=$(psql -X -q -d retention -c '\timing on' -c 'DROP TABLE partition_like' |
  sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p')

# 2. Batched deletes, as the janitor runs them, next to a steady writer.
cat >"$WORK/delete.sql" <<'SQL'
DELETE FROM outbox_events WHERE id IN (
  SELECT id FROM outbox_events
   WHERE status = 'PROCESSED' AND processed_at < now() - interval '7 days'
   ORDER BY processed_at LIMIT 1000);
SQL
cat >"$WORK/insert.sql" <<'SQL'
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, idempotency_key)
VALUES ('order', 'live', 'OrderCreated', '{}', gen_random_uuid()::text);
SQL
batches=$(((rows + 999) / 1000))
"$PG_BIN/pgbench" -n -c 1 -T 3600 -R 200 -f "$WORK/insert.sql" retention >"$WORK/insert.out" 2>&1 &
writer=$!
started=$(date +%s.%N)
pgbench -n -c 1 -t "$batches" -f "$WORK/delete.sql" retention >"$WORK/delete.out" 2>&1
ended=$(date +%s.%N)
kill "$writer" 2>/dev/null || true
wait "$writer" 2>/dev/null || true
left=$(q retention "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSED'")
[[ "$left" == 0 ]] || die "$left processed events left after $batches batches"

# 3. The janitor's audit retention, as outboxd runs it: the orders delivered (settled), their
#    events gone, the audit rows 40 days old; outboxd deletes them with audit.retention 30d and
#    logs how many in how long.
q retention "DELETE FROM outbox_events WHERE aggregate_id = 'live'" >/dev/null # the writer's, unprocessed
audit_rows=$(q retention "SELECT count(*) FROM aggregate_results")
q retention "UPDATE orders SET order_status = 'DELIVERED'" >/dev/null
q retention "UPDATE aggregate_results SET published_at = published_at - interval '40 days'" >/dev/null
q retention "VACUUM (ANALYZE)" >/dev/null
port=$("$PYTHON" "$BENCH/lib/bench.py" ports 1)
DATABASE_URL=$(conninfo retention) "$OUTBOXD" serve --set server.port="$port" \
  --set outbox.retention=0 --set dlq.retention=0 --set orders.retention=0 \
  --set audit.retention=30d >"$WORK/outboxd.log" 2>&1 &
outboxd_pid=$!
for _ in $(seq 3600); do
  grep -q "retention: deleted .* audit row" "$WORK/outboxd.log" && break
  kill -0 "$outboxd_pid" 2>/dev/null || die "outboxd exited: $(tail -5 "$WORK/outboxd.log")"
  sleep 0.5
done
kill -TERM "$outboxd_pid"; wait "$outboxd_pid" || true
audit_line=$(grep -m 1 "retention: deleted .* audit row" "$WORK/outboxd.log") || die "no audit retention line"
audit_left=$(q retention "SELECT count(*) FROM aggregate_results")
[[ "$audit_left" == 0 ]] || die "$audit_left audit rows left after \"$audit_line\": $(q retention \
  "SELECT string_agg(aggregate_id || ' ' || destination || ' ' || published_at, '; ') FROM (SELECT * FROM aggregate_results LIMIT 5) r")"

python3 - "$rows" "$drop_ms" "$started" "$ended" "$WORK/delete.out" "$audit_rows" "$audit_line" <<'PY'
import json, re, sys
rows, drop_ms, started, ended, out = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
audit_rows, audit_line = int(sys.argv[6]), sys.argv[7]
text = open(out).read()
latency = re.search(r"latency average = ([0-9.]+) ms", text)
audit_ms = int(re.search(r"audit row\(s\).* in ([0-9]+)ms", audit_line).group(1))
seconds = ended - started
print(json.dumps({
    "rows": rows,
    "partition_drop_ms": drop_ms,
    "batched_delete_seconds": round(seconds, 2),
    "batched_delete_rows_per_s": round(rows / seconds),
    "batch_of_1000_ms": float(latency.group(1)) if latency else None,
    "audit_rows": audit_rows,
    "audit_retention_seconds": round(audit_ms / 1000, 2),
    "audit_retention_rows_per_s": round(audit_rows / (audit_ms / 1000)) if audit_ms else None,
}))
PY
