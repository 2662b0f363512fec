#!/usr/bin/env bash
# The image as a user runs it: built from the repository's Dockerfile, started against a
# PostgreSQL container on a private network, checked from outside. Label `container`.
source "$(dirname "$0")/lib.sh"

prepare_images
say "image size: $(image_size "$outboxd_image")"

# --- the image itself -------------------------------------------------------------------------
no_toolchain() { ! podman run --rm --entrypoint sh "$outboxd_image" -c 'command -v g++ || command -v cc || command -v cmake || ls /usr/include/pqxx' >/dev/null 2>&1; }
check "no compiler, build tool or header in the runtime image" no_toolchain
binary=$(mktemp)
remember container "$suffix-copy"
quiet podman create --name "$suffix-copy" "$outboxd_image" >/dev/null
podman cp "$suffix-copy:/usr/local/bin/outboxd" "$binary"
stripped() { ! readelf -S "$binary" | grep -qE '\.symtab|\.debug_'; }
check "the binary is stripped (no .symtab, no .debug_* sections)" stripped
rm -f "$binary"
label() { podman image inspect --format "{{index .Config.Labels \"org.opencontainers.image.$1\"}}" "$outboxd_image"; }
version_label=$(label version)
check "label version ($version_label) is what the binary says" \
  test "outboxd $version_label" = "$(podman run --rm "$outboxd_image" --version)"
check "label revision is the commit built" test "$(label revision)" = "$(git -C "$repo" rev-parse HEAD)"
check "label source is set" test -n "$(label source)"

# --- configuration from the environment, bad values refused -----------------------------------
code=0
refused=$(podman run --rm -e OUTBOXD_OUTBOX_POOLSIZE=banana "$outboxd_image" check-config 2>&1) || code=$?
check "a bad OUTBOXD_OUTBOX_POOLSIZE is refused (exit $code) naming outbox.poolSize" \
  bash -c '[[ $1 == 2 ]] && grep -q "outbox.poolSize" <<<"$2"' _ "$code" "$refused"
code=0
refused=$(podman run --rm "$outboxd_image" 2>&1) || code=$?
check "without tokens the container refuses to start (exit $code) naming auth.tokens" \
  bash -c '[[ $1 == 2 ]] && grep -q "auth.tokens" <<<"$2"' _ "$code" "$refused"

# --- PostgreSQL in its own container, outboxd in another ---------------------------------------
start_postgres "$suffix-pgdata"

ob=$suffix-outboxd
remember container "$ob"
# As the Kubernetes manifests run it: a read-only root file system, no capabilities.
quiet podman run -d --name "$ob" --network "$network" -p 127.0.0.1::9000 --health-interval disable \
  --read-only --cap-drop ALL --security-opt no-new-privileges \
  -e DATABASE_URL="$database_url" \
  -e OUTBOXD_AUTH_TOKENS="$tokens_json" -e OUTBOXD_OUTBOX_POOLSIZE=8 -e OUTBOXD_LOG_FORMAT=json \
  -e OUTBOXD_OUTBOX_LEASETIMEOUT=10s -e OUTBOXD_OUTBOX_REAPERINTERVAL=2s \
  "$outboxd_image" >/dev/null
dump_logs_of="$ob $pg"
base="http://$(podman port "$ob" 9000/tcp)"
ready() { [[ $(status "$base/readyz") == 200 ]]; }
wait_for 60 "/readyz answers 200 at $base" ready

health() {
  podman healthcheck run "$ob" >/dev/null 2>&1 &&
    [[ $(podman inspect --format '{{.State.Health.Status}}' "$ob") == healthy ]]
}
check "the image's HEALTHCHECK reports healthy" health
pid=$(podman inspect --format '{{.State.Pid}}' "$ob")
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
check "outboxd runs as uid $uid, not root" test "$uid" = 10001
check "no token: 401" test "$(curl -s -o /dev/null -w '%{http_code}' "$base/api/orders")" = 401

# --- an order through the saga ------------------------------------------------------------------
first=$(new_order "$base" "ct-first")
confirmed() { [[ $(order_status "$base" "$1") == CONFIRMED ]]; }
wait_for 30 "order $first CONFIRMED" confirmed "$first"

processors=$(podman logs "$ob" 2>/dev/null | grep -oE '"actor":"outbox-processor-[0-9]+","msg":"started' | sort -u | wc -l)
check "OUTBOXD_OUTBOX_POOLSIZE=8: 8 outbox processors started (saw $processors)" test "$processors" = 8
check "the supervisor started them with their dead-letter children" \
  bash -c 'podman logs "$1" 2>/dev/null | grep -q "started 8 outbox processor(s) with dead-letter children"' _ "$ob"
connections=$(psql_in "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'outboxd-worker-%'")
check "the engine's database connections are in pg_stat_activity (${connections}, at most outbox.connections = 13)" \
  test "$connections" -ge 1 -a "$connections" -le 13
json_lines() {
  podman logs "$ob" 2>/dev/null | python3 -c '
import json, sys
n = 0
for line in sys.stdin:
    r = json.loads(line)
    assert {"ts", "level", "actor", "msg"} <= r.keys(), line
    n += 1
assert n > 10, n' && [[ -z $(podman logs "$ob" 2>&1 >/dev/null) ]]
}
check "OUTBOXD_LOG_FORMAT=json: every log line on stdout is a JSON record, nothing on stderr" json_lines

# --- the database container stops and starts again; nothing is lost ----------------------------------------------
# Calls in flight when it goes: every inventory reservation takes 400 ms.
api PUT "$base/api/simulator/config" -d '{"services": {"inventory.reserve": {"latencyMs": 400}}}' >/dev/null
before=()
for i in 1 2 3 4 5; do before+=("$(new_order "$base" "ct-before-$i")"); done
started_at=$(podman inspect --format '{{.State.StartedAt}}' "$ob")
podman stop -t 20 "$pg" >/dev/null
check "/readyz says 503 while the database is down" test "$(status "$base/readyz")" = 503
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 -X POST "$base/api/orders" -H "Authorization: Bearer $token" \
  -H 'Content-Type: application/json' -d '{"customerId":"C-refused","totalAmount":1.00,"shippingType":"domestic","items":[{"sku":"A-1","quantity":1}]}')
check "an order posted while the database is down is refused with 503 (got $code)" test "$code" = 503
podman start "$pg" >/dev/null
wait_for 60 "PostgreSQL back after its container's restart" pg_ready
wait_for 60 "/readyz ready again" ready
after=()
for i in 1 2 3 4 5; do after+=("$(new_order "$base" "ct-after-$i")"); done
for id in "${before[@]}" "${after[@]}"; do wait_for 60 "order $id CONFIRMED" confirmed "$id"; done
check "outboxd's container was not restarted" test "$(podman inspect --format '{{.State.StartedAt}}' "$ob")" = "$started_at"
check "11 orders in the database, none twice" test "$(psql_in "SELECT count(*) || '/' || count(DISTINCT customer_id) FROM orders")" = "11/11"
pending=$(psql_in "SELECT count(*) FROM outbox_events WHERE status <> 'PROCESSED'")
check "every outbox event processed ($pending left)" test "$pending" = 0

# --- SIGTERM with a call in flight ---------------------------------------------------------------------
# 4 s: long enough for the polls below (each a podman exec) to see the call in flight on a busy
# machine, short of the 5 s call timeout and well inside outbox.shutdownTimeout.
api PUT "$base/api/simulator/config" -d '{"services": {"inventory.reserve": {"latencyMs": 4000}}}' >/dev/null
last=$(new_order "$base" "ct-at-stop")
in_flight() { [[ $(psql_in "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING'") == 1 ]]; }
wait_for 10 "order $last's event in flight" in_flight
t0=$(date +%s.%N)
quiet podman stop -t 30 "$ob" >/dev/null
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
code=$(podman inspect --format '{{.State.ExitCode}}' "$ob")
check "SIGTERM: exit code 0 (got $code) in $took s, within outbox.shutdownTimeout (10 s)" \
  awk -v c="$code" -v t="$took" 'BEGIN { exit !(c == 0 && t < 10) }'
check "the stop is in the log" bash -c 'podman logs "$1" 2>/dev/null | grep -q SIGTERM' _ "$ob"
check "the event in flight was finished or handed back, not left leased" \
  test "$(psql_in "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING'")" = 0
dump_logs_of=""
say "PASS: container test"
