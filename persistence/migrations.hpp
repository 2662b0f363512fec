// Forward-only schema migrations (sql/NNN_name.sql, compiled into the binary).
#pragma once

#include <chrono>
#include <pqxx/pqxx>
#include <string>
#include <vector>

namespace outboxd::persistence {

struct migration {
  int version = 0;
  std::string name; // file name, e.g. "001_schema.sql"
  std::string sql;
};

/// The compiled-in migrations, ordered by version.
const std::vector<migration>& migrations();

/// The highest version among the compiled-in migrations.
int latest_migration_version();

/// How migrations wait for locks on a live database.
struct migrate_options {
  /// No statement waits longer than this for a lock (a write blocked behind a waiting ALTER waits
  /// no longer either); the migration is then rolled back and tried again.
  std::chrono::milliseconds lock_timeout{5000};
  int attempts = 8;                                 // per migration
  std::chrono::milliseconds first_retry_delay{500}; // doubling, at most 10 s
};

/// Applies every migration of `list` (by default the compiled-in ones) not yet applied, under an
/// advisory lock so several replicas may start at once. A file runs in one transaction, unless
/// its first line is `-- outboxd:no-transaction`: then each of its statements (each ending with
/// `;` at the end of a line, no function bodies) runs on its own, which `CREATE INDEX
/// CONCURRENTLY` needs; such statements must be safe to run again (`IF NOT EXISTS`), and an
/// index a failed concurrent build left INVALID is dropped before its statement runs again.
/// Refuses (throws) when an applied migration's text has changed. Returns the names of the
/// migrations applied now.
std::vector<std::string> migrate(pqxx::connection& conn, const migrate_options& options = {});
std::vector<std::string> migrate(pqxx::connection& conn, const std::vector<migration>& list,
                                 const migrate_options& options);

/// The highest applied version, 0 when none (or the bookkeeping table does not exist yet).
int applied_migration_version(pqxx::connection& conn);

/// The sessions whose open transactions are the oldest in this database (at most three: pid,
/// application, user, client, state, age), for a message about a lock or an index build that
/// waits; or a sentence saying there is none.
std::string oldest_transactions(pqxx::nontransaction& session);

} // namespace outboxd::persistence
