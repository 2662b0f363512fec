#!/usr/bin/env bash
# The long reliability run: the kill -9 chaos (or another scenario of test/reliability) at scale,
# on a release build, against a throwaway PostgreSQL. The summary is printed and written to
# test/reliability/results/<scenario>-<UTC time>.md.
#   scripts/reliability.sh [--orders N] [--kills N] [--duration SECONDS] [--seed N]
#                          [--scenario "doctest test-case pattern"]
# Defaults: 3000 orders, 100 kills, 600 s, a seed from the clock, scenario "kill -9 chaos*".
# The short versions of every scenario run in scripts/test.sh (ctest label "reliability").
set -euo pipefail
cd "$(dirname "$0")/.."

orders=3000 kills=100 duration=600 seed=$(date +%s) scenario="kill -9 chaos*"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --orders) orders=$2; shift 2 ;;
    --kills) kills=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --scenario) scenario=$2; shift 2 ;;
    *) echo "reliability.sh: unknown argument $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
done

bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target outboxd reliability_tests

source scripts/throwaway-db.sh

echo "reliability: ${scenario}: ${orders} orders, ${kills} disruptions over ${duration} s, seed ${seed}"
RELIABILITY_ORDERS=$orders RELIABILITY_KILLS=$kills RELIABILITY_DURATION=$duration \
  RELIABILITY_SEED=$seed RELIABILITY_RESULTS="$PWD/test/reliability/results" \
  build/release/test/reliability_tests --test-case="$scenario"
