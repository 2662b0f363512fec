#!/usr/bin/env bash
# A private PostgreSQL cluster in a folder of ours, reachable only through a Unix socket (so it
# never needs or takes a TCP port). Runs the server as the postgres user when we are root.
#   scripts/pg-cluster.sh start DIR   create on first use, start, print the connection string
#   scripts/pg-cluster.sh stop DIR [fast|immediate]
#                                     stop if running (fast shutdown unless immediate is asked)
#   scripts/pg-cluster.sh conninfo DIR
# PG_EXTRA_OPTS adds server options, e.g. "-c fsync=off" for throwaway test clusters.
set -euo pipefail

cmd=${1:?usage: pg-cluster.sh start|stop|conninfo DIR}
dir=${2:?usage: pg-cluster.sh start|stop|conninfo DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[[ -x "$bindir/pg_ctl" ]] || { echo "pg-cluster: PostgreSQL server not found; run scripts/install-deps.sh" >&2; exit 1; }

owner=()
if [[ $(id -u) -eq 0 ]]; then owner=(runuser -u postgres --); fi
as_owner() { "${owner[@]}" "$@"; }

# The socket path must stay under ~100 bytes, so it lives in a short directory of its own,
# remembered next to the data.
socket_dir() {
  if [[ ! -f "$dir/socket_dir" ]] || [[ ! -d "$(cat "$dir/socket_dir")" ]]; then
    mktemp -d /tmp/outboxd-pg.XXXXXX > "$dir/socket_dir"
    if [[ $(id -u) -eq 0 ]]; then chown postgres:postgres "$(cat "$dir/socket_dir")"; fi
  fi
  cat "$dir/socket_dir"
}

conninfo() {
  echo "host=$(socket_dir) port=5432 user=postgres dbname=${PGCLUSTER_DBNAME:-postgres}"
}

case "$cmd" in
  start)
    if [[ $(id -u) -eq 0 ]]; then
      chown postgres:postgres "$dir"
      if ! runuser -u postgres -- test -w "$dir"; then
        echo "pg-cluster: the postgres user cannot reach $dir (a parent folder is private);" \
             "clone the project under a world-readable path or run as a normal user" >&2
        exit 1
      fi
    fi
    if [[ ! -f "$dir/data/PG_VERSION" ]]; then
      as_owner "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
        --no-instructions >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    sock=$(socket_dir)
    if ! as_owner "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      # setsid: a Ctrl-C in the terminal reaches outboxd, not the database; we stop it in order.
      setsid -w "${owner[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-h '' -k $sock -p 5432 -c max_connections=300 ${PG_EXTRA_OPTS:-}" start >/dev/null ||
        { tail -n 20 "$dir/server.log" >&2; exit 1; }
    fi
    conninfo
    ;;
  stop)
    if [[ -f "$dir/data/PG_VERSION" ]] && as_owner "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      mode=${3:-fast}
      [[ "$mode" == fast || "$mode" == immediate ]] || { echo "pg-cluster: stop mode is fast or immediate" >&2; exit 2; }
      as_owner "$bindir/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null
    fi
    ;;
  conninfo)
    conninfo
    ;;
  *)
    echo "usage: pg-cluster.sh start|stop|conninfo DIR" >&2
    exit 2
    ;;
esac
