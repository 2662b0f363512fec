#!/usr/bin/env bash
# A new migration applied to a live database of millions of events: the test case of
# test/pg/migrations_test.cpp ("a new migration on a live table of millions of events ...") with
# 5 000 000 events instead of its default 100 000, on a throwaway cluster. Two writers take orders
# the whole time; a transaction left open for 5 s makes the migration's ALTER wait. The test
# fails if a write ever waited longer than the lock timeout (plus 1.5 s); it prints how long the
# migration took, how many orders were written meanwhile and the longest write.
#
#   bench/live_migration.sh [--events N]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
events=5000000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --events) events=${2:?--events needs a number}; shift ;;
    *) echo "usage: bench/live_migration.sh [--events N]" >&2; exit 2 ;;
  esac
  shift
done
TESTS=${PG_TESTS:-$ROOT/build/release/test/pg_tests}
[[ -x "$TESTS" ]] || { echo "bench/live_migration.sh: build $TESTS first" >&2; exit 1; }
cd "$ROOT"
source scripts/throwaway-db.sh
OUTBOXD_LIVE_MIGRATION_EVENTS=$events "$TESTS" -tc="a new migration on a live table*" --success=false
