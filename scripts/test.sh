#!/usr/bin/env bash
# The README's second command: install dependencies, build, start a throwaway PostgreSQL, run
# every test with ctest, stop the database. Exits non-zero on any failure.
#   scripts/test.sh [--preset asan|dev|release] [extra ctest arguments, e.g. -L unit]
# The default preset is asan (AddressSanitizer + UBSan, warnings as errors), what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

preset=${OUTBOXD_PRESET:-asan}
if [[ "${1:-}" == "--preset" ]]; then preset=$2; shift 2; fi

bash scripts/install-deps.sh
# The browser test's playwright-core, pinned by test/browser/package-lock.json.
if [[ ! -d test/browser/node_modules ]]; then npm ci --prefix test/browser --no-audit --no-fund; fi
# The OpenAPI validator of docs/openapi.json (label docs), pinned by test/openapi/package-lock.json.
if [[ ! -d test/openapi/node_modules ]]; then npm ci --prefix test/openapi --no-audit --no-fund; fi
# The Kubernetes manifests' validator (label docs), pinned by test/deploy/package-lock.json.
if [[ ! -d test/deploy/node_modules ]]; then npm ci --prefix test/deploy --no-audit --no-fund; fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"

source scripts/throwaway-db.sh
echo "test database: $TEST_DATABASE_URL"

# The upgrade test builds a second image (minutes): it runs when a label selects it (-L upgrade).
labelled=no
for a in "$@"; do [[ ($a == -L* && $a != -LE*) || $a == --label-regex* ]] && labelled=yes; done
if [[ $labelled == no ]]; then set -- "$@" -LE upgrade; fi
# The logs and files of the processes the tests start go to a folder of this run: removed when
# every test passed, kept (its path printed) when one failed.
scratch=$(mktemp -d /tmp/outboxd-test-files.XXXXXX)
if TMPDIR=$scratch ctest --preset "$preset" -j 2 "$@"; then
  rm -rf "$scratch"
else
  status=$?
  echo "test: the logs of the processes the tests started are kept in $scratch" >&2
  exit "$status"
fi
