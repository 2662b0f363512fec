#!/usr/bin/env bash
# Per-call latency of the outgoing client (libcurl) next to cpp-httplib's Client on loopback
# keep-alive, against a private `outboxd simulator`. Usage: bench/client_latency.sh [CALLS]
# (default 5000 per client). Builds the client_latency target of the dev build when missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build/dev}"
cmake --build "$build" --target client_latency outboxd >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$build/outboxd" simulator --port "$port" >/tmp/outboxd-client-latency-sim.log 2>&1 &
sim=$!
trap 'kill "$sim" 2>/dev/null; wait "$sim" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.1
done
# Failures are part of the simulated world; latency is what is measured here, so none are injected.
knobs='{"services":{"fraudCheck.check":{"failureRate":0}}}'
curl -fs -X PUT -H 'Content-Type: application/json' -d "$knobs" \
  "http://127.0.0.1:$port/api/simulator/config" >/dev/null
"$build/test/client_latency" "$port" "${1:-5000}"
