#!/usr/bin/env bash
# The README's first command: install dependencies, build Release, start a private PostgreSQL
# under .data/ (created on first run) unless DATABASE_URL is set, apply migrations and run
# outboxd in the foreground on http://127.0.0.1:9000. Ctrl-C stops outboxd, then the database
# (unless another run.sh or a psql still uses it).
# Any configuration key can be set through the environment (OUTBOXD_SERVER_PORT=9123) or with
# arguments passed through to outboxd (scripts/run.sh --set outbox.poolSize=8).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target outboxd
# A wrong key or value stops here, before a database is started for nothing (exit 2, naming it).
build/release/outboxd check-config --config conf/application.json "$@" >/dev/null

# stop_database: on exit, stop the private cluster unless another client (a second run.sh, a
# psql) still uses it; the last one out stops it.
stop_database() {
  local others
  others=$(psql "$cluster" -tAc "SELECT count(*) FROM pg_stat_activity
                                  WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()" \
           2>/dev/null || echo 0)
  if [[ "$others" != 0 ]]; then
    echo "run.sh: leaving PostgreSQL running: $others other client connection(s) use it"
  else
    echo "run.sh: stopping PostgreSQL"
    bash scripts/pg-cluster.sh stop "$data"
  fi
}

if [[ -z "${DATABASE_URL:-}" ]]; then
  data=.data/pg
  mkdir -p "$data"
  cluster=$(bash scripts/pg-cluster.sh start "$data")
  trap stop_database EXIT
  if [[ -z $(psql "$cluster" -tAc "SELECT 1 FROM pg_database WHERE datname = 'outboxd'") ]]; then
    psql "$cluster" -qc "CREATE DATABASE outboxd"
  fi
  export DATABASE_URL=$(PGCLUSTER_DBNAME=outboxd bash scripts/pg-cluster.sh conninfo "$data")
  echo "run.sh: PostgreSQL is up (psql \"$DATABASE_URL\")"
fi

# Not exec: the trap above stops the database after outboxd has exited.
build/release/outboxd serve --config conf/application.json "$@"
