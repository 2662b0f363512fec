# Sourced by scripts/test.sh and scripts/reliability.sh: starts a throwaway PostgreSQL cluster
# (durability off: it buys nothing there) in a temporary folder, exports its connection string as
# TEST_DATABASE_URL, and stops and removes it when the calling script exits.
throwaway_dir=$(mktemp -d /tmp/outboxd-test.XXXXXX)
throwaway_scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) # the caller may change folder
stop_throwaway_db() {
  bash "$throwaway_scripts/pg-cluster.sh" stop "$throwaway_dir/pg" || true
  rm -rf "$throwaway_dir" "$(cat "$throwaway_dir/pg/socket_dir" 2>/dev/null || true)"
}
trap stop_throwaway_db EXIT
if [[ $(id -u) -eq 0 ]]; then chmod 755 "$throwaway_dir"; fi
TEST_DATABASE_URL=$(PG_EXTRA_OPTS="-c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
  bash "$throwaway_scripts/pg-cluster.sh" start "$throwaway_dir/pg")
export TEST_DATABASE_URL
