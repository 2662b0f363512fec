# Shared by the container tests (sourced): the engine, the two images, a token, HTTP calls with
# it, and cleanup of everything a test started. Every name carries the test's own suffix, so
# runs side by side (or someone else's containers) are never touched.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
suffix="outboxd-ct-$$"
outboxd_image=${OUTBOXD_TEST_IMAGE:-localhost/outboxd:test}
postgres_image=localhost/outboxd-test-postgres:15
started=() # containers, networks and volumes to remove, as "kind name"

say() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
fail() {
  say "FAIL: $*"
  exit 1
}
check() { # check "what" command...: runs the command, fails the test naming what did not hold
  local what=$1
  shift
  if "$@"; then say "ok: $what"; else fail "$what"; fi
}

cleanup() {
  local status=$?
  if ((status != 0)) && [[ -n ${dump_logs_of:-} ]]; then
    for c in $dump_logs_of; do
      say "--- last log lines of $c"
      podman logs --tail 40 "$c" 2>&1 | sed 's/^/    /' >&2 || true
    done
  fi
  local i
  for ((i = ${#started[@]} - 1; i >= 0; i--)); do
    read -r kind name <<<"${started[i]}"
    case $kind in
    container) podman rm -f -t 0 "$name" >/dev/null 2>&1 || true ;;
    network) podman network rm -f "$name" >/dev/null 2>&1 || true ;;
    volume) podman volume rm -f "$name" >/dev/null 2>&1 || true ;;
    esac
  done
  exit "$status"
}
trap cleanup EXIT

# The engine, or a message saying why there is none; then both images (layers cached).
prepare_images() {
  bash "$repo/scripts/container-engine.sh" || fail "no usable container engine (above); the container tests cannot run here"
  local t0=$SECONDS version revision source
  version=$(sed -n 's/^project(outboxd VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
  revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
  source=$(git -C "$repo" remote get-url origin 2>/dev/null || echo "$repo")
  # The labels also as --label: podman 4.3 reuses a cached LABEL layer whatever the build args.
  podman build --format docker -q -t "$outboxd_image" \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg SOURCE="$source" \
    --label org.opencontainers.image.revision="$revision" \
    --label org.opencontainers.image.source="$source" \
    "$repo" >/dev/null || fail "podman build of the Dockerfile failed"
  say "image $outboxd_image built in $((SECONDS - t0)) s ($(image_size "$outboxd_image"))"
  t0=$SECONDS
  podman build --format docker -q -t "$postgres_image" "$repo/test/container/postgres" >/dev/null ||
    fail "podman build of the PostgreSQL image failed"
  say "image $postgres_image built in $((SECONDS - t0)) s"
}

image_size() { podman image inspect --format '{{.Size}}' "$1" | numfmt --to=si --suffix=B; }

# An admin token and its entry for OUTBOXD_AUTH_TOKENS.
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
tokens_json="[{\"name\":\"container-test\",\"role\":\"admin\",\"sha256\":\"$(printf %s "$token" | sha256sum | cut -c1-64)\"}]"

remember() { started+=("$1 $2"); }
# Without systemd, podman reports on stderr that it cannot set up health-check timers (the tests
# run the checks themselves): that line only is dropped.
quiet() { "$@" 2> >(grep -v 'systemd connection' >&2); }

# api METHOD URL [curl args...]: the body on stdout; fails on a transport error only.
api() {
  local method=$1 url=$2
  shift 2
  curl -sS --max-time 10 -X "$method" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' "$url" "$@"
}
# status URL: the HTTP status of a GET, 000 when nothing answers.
status() { curl -s -o /dev/null --max-time 5 -w '%{http_code}' -H "Authorization: Bearer $token" "$1" || true; }

# wait_for SECONDS what command...: polls every 0.5 s until the command succeeds.
wait_for() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    ((SECONDS < deadline)) || fail "$what: not within $seconds s"
    sleep 0.5
  done
  say "ok: $what"
}

# start_postgres [VOLUME]: a private network ($network) and a PostgreSQL container on it (alias
# postgres, data in VOLUME when given), ready; sets pg and database_url.
network=$suffix
start_postgres() {
  remember network "$network"
  podman network create "$network" >/dev/null
  local password volume=()
  password=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
  if [[ -n ${1:-} ]]; then
    remember volume "$1"
    podman volume create "$1" >/dev/null
    volume=(-v "$1:/var/lib/postgresql/data")
  fi
  pg=$suffix-postgres
  remember container "$pg"
  podman run -d --name "$pg" --network "$network" --network-alias postgres \
    -e POSTGRES_USER=outboxd -e POSTGRES_PASSWORD="$password" -e POSTGRES_DB=outboxd \
    "${volume[@]}" "$postgres_image" >/dev/null
  wait_for 60 "PostgreSQL container accepts connections" pg_ready
  database_url="postgresql://outboxd:$password@postgres:5432/outboxd"
}
pg_ready() { podman exec "$pg" pg_isready -q -U outboxd -d outboxd; }
psql_in() { podman exec "$pg" psql -qAt -U outboxd -d outboxd -c "$1"; }

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

new_order() { # new_order BASE_URL KEY [shippingType]: prints the new order's id
  api POST "$1/api/orders" -H "Idempotency-Key: $2" \
    -d "{\"customerId\":\"C-$2\",\"totalAmount\":42.50,\"shippingType\":\"${3:-domestic}\",\"items\":[{\"sku\":\"A-1\",\"quantity\":1}]}" |
    json 'd["id"]'
}
order_status() { api GET "$1/api/orders/$2" | json 'd["order"]["status"]'; }
