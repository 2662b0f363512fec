#!/usr/bin/env bash
# A rolling upgrade across the newest migration: a replica of the version before it (built from
# git history, packaged by this Dockerfile) serves and drains while a replica of this version
# starts against the same database, applies the migration once, and takes over; the old replica
# then gets SIGTERM. Orders flow through both the whole time; at the end every accepted order is
# in the database and settled, the books balance (0 violations, 0 duplicate side effects), and
# each migration is recorded once. Label `upgrade` (it builds a second image: a few minutes);
# OUTBOXD_UPGRADE_FROM=<commit> upgrades from another version.
source "$(dirname "$0")/lib.sh"

prepare_images
newest=$(cd "$repo/sql" && ls [0-9]*.sql | tail -1)
if [[ -n ${OUTBOXD_UPGRADE_FROM:-} ]]; then
  from=$(git -C "$repo" rev-parse "$OUTBOXD_UPGRADE_FROM")
else
  added=$(git -C "$repo" log -1 --format=%H --diff-filter=A -- "sql/$newest") ||
    fail "no git history here (a shallow clone?): set OUTBOXD_UPGRADE_FROM"
  [[ -n $added ]] || fail "git history does not know sql/$newest: set OUTBOXD_UPGRADE_FROM"
  from=$(git -C "$repo" rev-parse "$added^")
fi
old_image=localhost/outboxd:upgrade-from-${from:0:12}
if ! podman image exists "$old_image"; then
  work=$(mktemp -d)
  git -C "$repo" archive "$from" | tar -x -C "$work"
  # That version's code, packaged as this version packages it (as a registry would serve it);
  # its own .dockerignore, which keeps the tests its CMakeLists needs.
  cp "$repo/Dockerfile" "$work/"
  cp "$repo/scripts/install-deps.sh" "$work/scripts/"
  t0=$SECONDS
  podman build --format docker -q -t "$old_image" "$work" >/dev/null || fail "building ${from:0:12} failed"
  rm -rf "$work"
  say "image of ${from:0:12} (before $newest) built in $((SECONDS - t0)) s"
fi

start_postgres

# One outside world for both versions: the new image's simulator.
sim=$suffix-simulator
remember container "$sim"
quiet podman run -d --name "$sim" --network "$network" --network-alias simulator -p 127.0.0.1::9100 \
  -e OUTBOXD_AUTH_ALLOWANONYMOUS=true -e OUTBOXD_AUTH_ANONYMOUSROLE=admin \
  -e 'OUTBOXD_SERVER_ALLOWEDHOSTS=["simulator"]' \
  "$outboxd_image" simulator --port 9100 >/dev/null
simulator="http://$(podman port "$sim" 9100/tcp)"
database=(-e DATABASE_URL="$database_url"
  -e OUTBOXD_SIMULATOR_ENABLED=false -e OUTBOXD_SIMULATOR_BASEURL=http://simulator:9100
  -e OUTBOXD_OUTBOX_LEASETIMEOUT=10s -e OUTBOXD_OUTBOX_REAPERINTERVAL=2s)
start() { # start NAME IMAGE [podman run options...]: prints its base URL once ready
  local name=$1 image=$2
  shift 2
  remember container "$name"
  quiet podman run -d --name "$name" --network "$network" -p 127.0.0.1::9000 "${database[@]}" "$@" \
    "$image" >/dev/null
  local url="http://$(podman port "$name" 9000/tcp)"
  ready_at() { [[ $(status "$1/readyz") == 200 ]]; }
  wait_for 90 "$name ($image) ready" ready_at "$url"
  echo "$url"
}
old=$(start "$suffix-old" "$old_image")
dump_logs_of="$suffix-old $pg"
before=$(psql_in "SELECT max(version) FROM schema_migrations")
check "the old version migrated the database to $before, short of $newest" test "$before" -lt "${newest%%_*}"
api PUT "$simulator/api/simulator/config" -d '{"services": {
  "billing.charge": {"failureRate": 0.2, "failureStatus": 402},
  "inventory.reserve": {"latencyMs": 200}}}' >/dev/null

# Orders flow the whole time, to whichever replicas are listed in $targets (a file the loop
# rereads), counting what was accepted.
targets=$(mktemp) accepted=$(mktemp)
echo "$old" >"$targets"
python3 - "$targets" "$accepted" "$token" <<'PY' &
import json, sys, time, urllib.request
targets, accepted, token = sys.argv[1:4]
i = 0
while True:
    urls = open(targets).read().split()
    if not urls:
        break
    url = urls[i % len(urls)]
    body = {"customerId": f"C-upgrade-{i}", "totalAmount": 10.00 + i % 7,
            "shippingType": "domestic", "items": [{"sku": "A-1", "quantity": 1}]}
    request = urllib.request.Request(url + "/api/orders", json.dumps(body).encode(),
        {"Authorization": "Bearer " + token, "Content-Type": "application/json",
         "Idempotency-Key": f"upgrade-{i}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            if answer.status == 201:
                with open(accepted, "a") as f:
                    f.write(f"{json.load(answer)['id']} {url}\n")
    except Exception as e:  # a replica going away: the order was not accepted, try the next
        print(f"order {i} to {url}: {e}", file=sys.stderr)
    i += 1
    time.sleep(0.05)
PY
load=$!
sleep 3

new=$(start "$suffix-new" "$outboxd_image" -e OUTBOXD_AUTH_TOKENS="$tokens_json")
dump_logs_of="$suffix-old $suffix-new $pg"
echo "$old $new" >"$targets"
check "the new version applied $newest while the old one served" \
  test "$(psql_in "SELECT max(version) FROM schema_migrations")" = "$((10#${newest%%_*}))"
check "each migration recorded once" \
  test "$(psql_in "SELECT count(*) = count(DISTINCT version) FROM schema_migrations")" = t
applied() { podman logs "$1" 2>&1 | grep -c "applied $newest" || true; }
check "$newest applied by the new replica only, once" test "$(applied "$suffix-new")/$(applied "$suffix-old")" = "1/0"
accepted_by() { awk -v u="$1" '$2 == u' "$accepted" | wc -l; }
at_migration=$(accepted_by "$old")
sleep 5
check "the old replica kept taking orders on the migrated schema" test "$(accepted_by "$old")" -gt "$at_migration"

# The rolling step: the old replica is told to stop.
echo "$new" >"$targets"
t0=$(date +%s.%N)
quiet podman stop -t 30 "$suffix-old" >/dev/null
check "the old replica exits 0 on SIGTERM ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s)" \
  test "$(podman inspect --format '{{.State.ExitCode}}' "$suffix-old")" = 0
sleep 5
: >"$targets"
wait "$load" || true

total=$(wc -l <"$accepted")
by_old=$(accepted_by "$old")
say "orders accepted: $total ($by_old by the old replica)"
check "orders went through both versions" test "$by_old" -gt 0 -a "$((total - by_old))" -gt 0
settled() {
  [[ $(psql_in "SELECT (SELECT count(*) FROM outbox_events WHERE status IN ('PENDING','PROCESSING'))
                     + (SELECT count(*) FROM dead_letter_events WHERE status IN ('PENDING','PROCESSING'))
                     + (SELECT count(*) FROM orders WHERE order_status IN ('PENDING','CANCELLING'))") == 0 ]]
}
wait_for 120 "every order settled" settled
ids=$(cut -d' ' -f1 "$accepted" | sort -n | paste -sd, -)
check "all $total accepted orders are in the database" \
  test "$(psql_in "SELECT count(*) FROM orders WHERE id IN ($ids)")" = "$total"
report=$(api GET "$new/api/admin/consistency?limit=1000")
check "consistency: 0 violations over $(json 'd["checked"]' <<<"$report") orders" test "$(json 'len(d["violations"])' <<<"$report")" = 0
check "no side effect applied twice" test "$(api GET "$simulator/api/simulator/ledger" | json 'len(d["duplicates"])')" = 0
dump_logs_of=""
say "PASS: upgrade from ${from:0:12} to $(git -C "$repo" rev-parse --short HEAD) ($total orders)"
