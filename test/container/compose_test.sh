#!/usr/bin/env bash
# docker-compose.yml as a user scales it: three outboxd replicas sharing one PostgreSQL and one
# simulator, orders with failures injected, one replica killed (-9) mid-saga, and the books
# checked: every order settled, 0 consistency violations, 0 duplicate side effects. Label
# `container`; runs podman-compose on the images lib.sh builds (Debian's podman-compose 1.0.3
# scales by the file's deploy.replicas only, hence OUTBOXD_REPLICAS rather than --scale).
source "$(dirname "$0")/lib.sh"
command -v podman-compose >/dev/null || fail "podman-compose is not installed (scripts/install-deps.sh installs it)"

prepare_images
project=${suffix//-/_}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export POSTGRES_IMAGE=$postgres_image OUTBOXD_IMAGE=$outboxd_image
export OUTBOXD_AUTH_TOKENS=$tokens_json OUTBOXD_PORTS=127.0.0.1: SIMULATOR_PORT=$(free_port)
export POSTGRES_PASSWORD=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
export OUTBOXD_OUTBOX_LEASETIMEOUT=8s OUTBOXD_LOG_FORMAT=json OUTBOXD_REPLICAS=3
compose() { podman-compose --no-ansi -p "$project" -f "$repo/docker-compose.yml" "$@"; }
# podman-compose 1.0.3's down leaves the project's network behind.
down() {
  compose down -v >/dev/null 2>&1 || true
  podman network rm -f "${project}_default" >/dev/null 2>&1 || true
}
trap 'status=$?; if ((status)); then for c in $(podman ps -a --format "{{.Names}}" --filter "label=com.docker.compose.project=$project"); do say "--- $c"; podman logs --tail 25 "$c" 2>&1 | sed "s/^/    /" >&2; done; fi; down; exit $status' EXIT

t0=$SECONDS
compose up -d >"${TMPDIR:-/tmp}/compose-up-$$.log" 2>&1 ||
  { cat "${TMPDIR:-/tmp}/compose-up-$$.log" >&2; fail "podman-compose up failed"; }
in_project() { podman ps --format '{{.Names}}' --filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.service=$1" | sort; }
mapfile -t replicas < <(in_project outboxd)
pg=$(in_project postgres)
check "three outboxd replicas, one postgres, one simulator" \
  test "${#replicas[@]}" = 3 -a -n "$pg" -a -n "$(in_project simulator)"
declare -A bases # replica -> its URL on the host
for r in "${replicas[@]}"; do bases[$r]="http://$(podman port "$r" 9000/tcp)"; done
base_of() { echo "${bases[$1]}"; }
simulator="http://127.0.0.1:$SIMULATOR_PORT"
for r in "${replicas[@]}"; do
  ready_at() { [[ $(status "$(base_of "$1")/readyz") == 200 ]]; }
  wait_for 90 "$r ready" ready_at "$r"
done
say "compose up with three replicas ready in $((SECONDS - t0)) s"

no_own_simulator() { [[ $(status "$(base_of "${replicas[0]}")/api/simulator/config") == 404 ]]; }
check "the replicas run no simulator of their own" no_own_simulator
# Failures: a fifth of the charges declined (the saga compensates), shipments and releases that
# fail now and then with 503 (retried), and 1.5 s per reservation (0.3 s per fraud check) so that a
# replica holds events mid-saga when it is killed.
api PUT "$simulator/api/simulator/config" -d '{"services": {
  "billing.charge": {"failureRate": 0.2, "failureStatus": 402},
  "shipping.domestic.create": {"failureRate": 0.2, "failureStatus": 503, "retryAfter": 0},
  "inventory.release": {"failureRate": 0.3, "failureStatus": 503, "retryAfter": 0},
  "inventory.reserve": {"latencyMs": 1500}, "fraudCheck.check": {"latencyMs": 300}}}' >/dev/null
check "the shared simulator took the failure knobs" \
  test "$(api GET "$simulator/api/simulator/config" | json 'd["services"]["billing.charge"]["failureRate"]')" = 0.2

orders=0
send() { # send N orders, round-robin over the given replicas, as fast as they are taken
  local n=$1
  shift
  local urls=()
  for r in "$@"; do urls+=("$(base_of "$r")"); done
  python3 - "$n" "$orders" "$token" "${urls[@]}" <<'PY' || fail "an order was refused"
import json, sys, urllib.request
n, first, token, urls = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
for i in range(first, first + n):
    body = {"customerId": f"C-compose-{i}", "totalAmount": 42.50, "items": [{"sku": "A-1", "quantity": 1}],
            "shippingType": "international" if i % 4 == 3 else "domestic"}
    request = urllib.request.Request(urls[i % len(urls)] + "/api/orders", json.dumps(body).encode(),
        {"Authorization": "Bearer " + token, "Content-Type": "application/json",
         "Idempotency-Key": f"compose-{i}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 201, answer.status
PY
  orders=$((orders + n))
}
send 45 "${replicas[@]}"
victim=${replicas[1]}
victim_host=$(podman inspect --format '{{.Config.Hostname}}' "$victim")
podman kill -s KILL "$victim" >/dev/null
held=$(psql_in "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING' AND lease_owner LIKE '%@$victim_host:%'")
check "killed $victim (-9) while it held $held events mid-saga (lease owner ...@$victim_host)" test "$held" -gt 0
survivors=("${replicas[0]}" "${replicas[2]}")
send 30 "${survivors[@]}"
# Cancel a few confirmed orders: compensation across replicas, too.
for id in $(psql_in "SELECT id FROM orders WHERE order_status = 'CONFIRMED' ORDER BY id LIMIT 5"); do
  api POST "$(base_of "${survivors[0]}")/api/orders/$id/cancel" -d '{"reason":"compose test"}' >/dev/null
done

settled() {
  [[ $(psql_in "SELECT (SELECT count(*) FROM outbox_events WHERE status IN ('PENDING','PROCESSING'))
                     + (SELECT count(*) FROM dead_letter_events WHERE status IN ('PENDING','PROCESSING'))") == 0 ]] || return 1
  [[ $(psql_in "SELECT count(*) FROM orders WHERE order_status IN ('PENDING','CANCELLING','ATTENTION')") == 0 ]] && return 0
  # Compensations that gave up: redriven by an operator, now that the world is quiet.
  api PUT "$simulator/api/simulator/config" -d '{"services": {"inventory.release": {"failureRate": 0}}}' >/dev/null
  for id in $(psql_in "SELECT id FROM dead_letter_events WHERE status = 'FAILED'"); do
    api POST "$(base_of "${survivors[0]}")/api/dlq/$id/retry" >/dev/null
  done
  return 1
}
wait_for 180 "all $orders orders settled after the kill (the survivors took over its leases)" settled
say "orders by status: $(psql_in "SELECT string_agg(order_status || ' ' || n, ', ') FROM (SELECT order_status, count(*) n FROM orders GROUP BY 1 ORDER BY 1) s")"
check "$orders orders in the database" test "$(psql_in 'SELECT count(*) FROM orders')" = "$orders"
twice=$(psql_in "SELECT count(*) FROM (SELECT event_id, destination FROM aggregate_results WHERE outcome = 'success' GROUP BY 1, 2 HAVING count(*) > 1) d")
check "no (event, destination) succeeded twice in the audit ($twice)" test "$twice" = 0
report=$(api GET "$(base_of "${survivors[1]}")/api/admin/consistency")
check "consistency report: every order checked against the shared ledger, 0 violations" \
  test "$(json 'd["checked"], len(d["violations"])' <<<"$report")" = "$orders 0"
ledger=$(api GET "$simulator/api/simulator/ledger")
check "the shared ledger: side effects from every replica's orders, 0 duplicates" \
  test "$(json 'len(d["duplicates"]), len(d["entries"]) > 0' <<<"$ledger")" = "0 True"
say "PASS: compose test ($orders orders, one replica killed, $((SECONDS - t0)) s)"
